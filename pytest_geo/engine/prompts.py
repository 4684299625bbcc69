"""Prompt directories in the E-GEO layout: which templates a role needs, what each may use."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from pytest_geo.templates import PromptError, from_egeo_format, placeholders, read_prompt_file

# What each template may use, and what it must use to do its job.
# {{candidates}} is the E-GEO harness's block format, {{candidates_json}} an indented JSON
# array, {{candidates_jsonl}} one JSON object per line, {{products}} the E-GEO benchmark's
# numbered products (`[1] title`, then the description's lines).
CANDIDATE_VARS = frozenset({"candidates", "candidates_json", "candidates_jsonl", "products"})
# What a ranker template names to ask for E-GEO's answer, `{"ranking": [...],
# "questionable_products": [...]}`, instead of `{"ordered_ids": [...]}`.
EGEO_ANSWER_FIELD = "questionable_products"
RANKER_VARS = frozenset({"query", "query_id", "n_candidates"}) | CANDIDATE_VARS
REWRITER_VARS = frozenset({"query", "query_id", "id", "target_id", "title", "description"})
# {{batch_summary}} and {{history}} as in the E-GEO harness's meta_optimizer_user.txt.
OPTIMIZER_VARS = frozenset(
    {"current_prompt", "feedback", "examples", "score", "required_placeholders", "optional_placeholders",
     "batch_summary", "history"}
)

TEMPLATES: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "ranker_system.txt": (RANKER_VARS, frozenset()),
    "ranker_user.txt": (RANKER_VARS, frozenset({"query"})),
    "rewriter_system.txt": (REWRITER_VARS, frozenset()),
    "rewriter_user.txt": (REWRITER_VARS, frozenset({"title", "description"})),
}
OPTIONAL_TEMPLATES: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "meta_optimizer_system.txt": (OPTIMIZER_VARS, frozenset()),
    "meta_optimizer_user.txt": (OPTIMIZER_VARS, frozenset({"current_prompt"})),
}


@dataclass(frozen=True)
class PromptSet:
    directory: Path
    ranker_system: str
    ranker_user: str
    rewriter_system: str
    rewriter_user: str
    meta_optimizer_system: str | None = None
    meta_optimizer_user: str | None = None

    @property
    def egeo_answers(self) -> bool:
        """Whether the ranker is asked for E-GEO's answer (its templates name
        `questionable_products`): the answer is then parsed, and its flags recorded, so."""
        return EGEO_ANSWER_FIELD in self.ranker_system or EGEO_ANSWER_FIELD in self.ranker_user

    def with_rewriter_user(self, template: str) -> PromptSet:
        check_template("rewriter_user.txt", template, *TEMPLATES["rewriter_user.txt"])
        return PromptSet(
            self.directory,
            self.ranker_system,
            self.ranker_user,
            self.rewriter_system,
            template,
            self.meta_optimizer_system,
            self.meta_optimizer_user,
        )


def check_template(
    name: str, text: str, allowed: frozenset[str], required: frozenset[str], where: Path | None = None
) -> None:
    label = str(where / name) if where is not None else name
    used = placeholders(text)
    unknown = sorted(used - allowed)
    if unknown:
        raise PromptError(
            f"{label}: unknown placeholder {{{{{unknown[0]}}}}} "
            f"(this template can use: {', '.join('{{' + v + '}}' for v in sorted(allowed))})"
        )
    missing = sorted(required - used)
    if missing:
        raise PromptError(f"{label}: missing placeholder {{{{{missing[0]}}}}} that this role needs")
    if name == "ranker_user.txt" and not used & CANDIDATE_VARS:
        raise PromptError(f"{label}: missing placeholder {{{{candidates}}}} that this role needs")


def egeo_rewriting_prompt(path: Path, text: str) -> str:
    """A rewriter template written for E-GEO's script (`{description}`) as ours; any other
    as it is. PromptError naming the file for one that cannot be read so."""
    try:
        return from_egeo_format(text)
    except PromptError as exc:
        raise PromptError(f"{path}: {exc}") from None


def load_prompts(directory: Path | str) -> PromptSet:
    """Read and check a prompts directory; every problem names the file."""
    directory = Path(directory)
    if not directory.is_dir():
        raise PromptError(f"{directory}: prompts directory not found")
    texts: dict[str, str | None] = {}
    for name in (*TEMPLATES, *OPTIONAL_TEMPLATES):
        path = directory / name
        if not os.path.lexists(path) and name not in TEMPLATES:
            texts[name] = None
            continue
        text = read_prompt_file(path)
        if name in TEMPLATES:  # the meta prompts are checked where they are used (optimize-prompts)
            if name.startswith("rewriter"):
                text = egeo_rewriting_prompt(path, text)
            check_template(name, text, *TEMPLATES[name], directory)
        texts[name] = text
    return PromptSet(
        directory=directory,
        ranker_system=texts["ranker_system.txt"] or "",
        ranker_user=texts["ranker_user.txt"] or "",
        rewriter_system=texts["rewriter_system.txt"] or "",
        rewriter_user=texts["rewriter_user.txt"] or "",
        meta_optimizer_system=texts["meta_optimizer_system.txt"],
        meta_optimizer_user=texts["meta_optimizer_user.txt"],
    )
