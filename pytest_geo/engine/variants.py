"""Rewriting strategies compared in one run (`--geo-variant NAME=PATH`).

A variant changes only what the rewriter is told: a file is its user template, a
directory may hold `rewriter_user.txt` and `rewriter_system.txt`, each overriding the
run's. The ranker's prompts are the run's for every variant (the judge must be the same
for the comparison to mean anything): a directory whose ranker prompts differ from the
run's is an error, one that copies them unchanged (`egeo init`, then an edit of the
rewriter) is accepted. Every problem is a PromptError naming the variant and the file."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from pytest_geo.engine.prompts import TEMPLATES, PromptSet, check_template, egeo_rewriting_prompt
from pytest_geo.engine.styles import ATTACK_SYSTEM, is_attack
from pytest_geo.templates import PromptError

REWRITER_FILES = ("rewriter_user.txt", "rewriter_system.txt")
RANKER_FILES = ("ranker_system.txt", "ranker_user.txt")


@dataclass(frozen=True)
class Variant:
    name: str
    source: Path
    rewriter_user: str | None = None  # None: the run's
    rewriter_system: str | None = None
    # Ranker prompts found in a directory variant: they must equal the run's.
    ranker: Mapping[str, str] = field(default_factory=dict)

    def prompts(self, base: PromptSet) -> PromptSet:
        """The run's prompts with this variant's rewriter prompts."""
        for name, text in self.ranker.items():
            if text != getattr(base, name.removesuffix(".txt")):
                raise PromptError(
                    f"variant {self.name}: {self.source / name}: differs from the run's {base.directory / name}; "
                    "a variant may change the rewriter's prompts only, never the ranker's (the judge)"
                )
        return replace(
            base,
            rewriter_user=base.rewriter_user if self.rewriter_user is None else self.rewriter_user,
            rewriter_system=base.rewriter_system if self.rewriter_system is None else self.rewriter_system,
        )


def _read(name: str, path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PromptError(f"variant {name}: {path}: cannot read template: {exc}") from None


def _checked(name: str, template: str, path: Path, text: str) -> str:
    """The template, checked; an E-GEO rewriting prompt (`{description}`) made ours."""
    try:
        text = egeo_rewriting_prompt(path, text)
        check_template(str(path), text, *TEMPLATES[template])
    except PromptError as exc:
        raise PromptError(f"variant {name}: {exc}") from None
    return text


def load_variant(name: str, path: Path) -> Variant:
    """Read and check one variant's files (nothing of the run's prompts is needed)."""
    if path.is_file():
        # A packaged attack brings its own system prompt: the run's forbids what it must do.
        system = _read(name, ATTACK_SYSTEM) if is_attack(path) else None
        return Variant(name, path, rewriter_user=_checked(name, "rewriter_user.txt", path, _read(name, path)),
                       rewriter_system=system)
    if not path.is_dir():
        raise PromptError(f"variant {name}: {path}: no such template file or prompts directory")
    texts = {f: _checked(name, f, path / f, _read(name, path / f)) for f in REWRITER_FILES if (path / f).is_file()}
    if not texts:
        raise PromptError(f"variant {name}: {path}: has neither {' nor '.join(REWRITER_FILES)}")
    ranker = {f: _read(name, path / f) for f in RANKER_FILES if (path / f).is_file()}
    return Variant(name, path, texts.get("rewriter_user.txt"), texts.get("rewriter_system.txt"), ranker)


def load_variants(paths: Mapping[str, Path]) -> list[Variant]:
    return [load_variant(name, path) for name, path in paths.items()]
