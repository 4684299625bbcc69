"""A judge of a panel (`--geo-judge NAME=MODEL`), as settings carry it: a name and a
model, with optional settings of its own, as E-GEO gives each judge its own. The engine
reads its system template (engine/judges.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

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
