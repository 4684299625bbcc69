"""A panel of judges (`--geo-judge NAME=MODEL`): rankers that each rank a row's candidates
before and after its rewrite, so one rewrite is scored by several models.

A judge is a name and a model, with optional settings of its own, as E-GEO gives each
judge its own: `system=PATH` (a ranker system template replacing the run's),
`temperature=T` and `max_output_tokens=N`. The command line and the ini's `geo_judges`
lines take the same text: `NAME = MODEL [system=PATH] [temperature=T] [max_output_tokens=N]`.
Without judges the ranker is the one judge and nothing here is used."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from pytest_geo.engine.prompts import TEMPLATES, check_template
from pytest_geo.templates import PromptError

JUDGE_SETTINGS = ("system", "temperature", "max_output_tokens")


@dataclass(frozen=True)
class Judge:
    name: str
    model: str
    system: Path | None = None  # a ranker system template of its own (None: the run's)
    temperature: float | None = None  # None: the run's
    max_output_tokens: int | None = None  # None: the run's
    system_text: str | None = None  # the template, read by `load` before the run starts


def judges_from(given: Sequence[Judge], source: str, base: Path) -> list[Judge]:
    """The judges in the order given, their system files relative to `base`; a name given
    twice is a ValueError naming `source`."""
    seen: set[str] = set()
    judges = []
    for one in given:
        if one.name in seen:
            raise ValueError(f"{source}: judge {one.name!r} is given twice")
        seen.add(one.name)
        judges.append(replace(one, system=base / one.system) if one.system is not None else one)
    return judges


def load(judges: Sequence[Judge]) -> list[Judge]:
    """Each judge with its system template read and checked; a PromptError names the
    judge and the file."""
    loaded = []
    for one in judges:
        if one.system is None:
            loaded.append(one)
            continue
        try:
            text = one.system.read_text(encoding="utf-8")
            check_template(str(one.system), text, *TEMPLATES["ranker_system.txt"])
        except (OSError, UnicodeDecodeError) as exc:
            raise PromptError(f"judge {one.name}: {one.system}: cannot read the system template: {exc}") from None
        except PromptError as exc:
            raise PromptError(f"judge {one.name}: {exc}") from None
        loaded.append(replace(one, system_text=text))
    return loaded
