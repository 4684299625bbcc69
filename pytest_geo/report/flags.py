"""Flag rates: how often a judge listed the target among E-GEO's `questionable_products`,
before and after the rewrite. A rewrite that gets its product flagged has failed, however
far it moved it, so the rates sit beside the fact check; the red-team summary shows, per
packaged attack and judge, the mean improvement and the flag rate, as the benchmark
reports its attacks: which judges a manipulation fools, and which see through it.

Rows are the unit. A judge's rates are over the rows it scored (improvement known) whose
answer had the list (a cached before-ranking may lack it); the panel's counts a row
flagged when any of its judges flagged the target. Without a panel the ranker is the one
judge, named `ranker`. The standard error of a rate is the benchmark's,
sqrt(p (1 - p) / n); None where n is 0."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_geo.data.record import RowRecord, is_scored
from pytest_geo.scoring import summarize

RANKER = "ranker"  # the judge's name when the ranker ranks alone
PANEL = "panel"
STEPS = ("before", "after")


@dataclass(frozen=True)
class Rate:
    """`flagged` of `n` rows."""

    n: int
    flagged: int

    @property
    def rate(self) -> float | None:
        return self.flagged / self.n if self.n else None

    @property
    def se(self) -> float | None:
        p = self.rate
        return math.sqrt(p * (1 - p) / self.n) if p is not None else None

    def as_json(self) -> dict[str, Any]:
        return {"n": self.n, "flagged": self.flagged, "rate": self.rate, "se": self.se}

    def text(self) -> str:
        return rate_text(self.rate)


def rate_text(value: float | None) -> str:
    """A rate (or its se) as every report shows it: 4 decimals, n/a where no row counted."""
    return "n/a" if value is None else f"{value:.4f}"


def judged_cells(record: RowRecord) -> dict[str, Mapping[str, Any]]:
    """Judge -> the cell of this row it scored (its ranks and flags): the row's judges,
    or the row itself as RANKER without a panel. A judge that did not score it is left out."""
    judges = record.get("judges")
    cells: Mapping[str, Mapping[str, Any]] = judges if judges else {RANKER: record}
    return {name: cell for name, cell in cells.items()
            if cell.get("error") is None and cell.get("rank_improvement") is not None}


def _flag(cell: Mapping[str, Any], step: str) -> bool | None:
    value = cell.get(f"flagged_{step}")
    return value if isinstance(value, bool) else None


def _rate(flags: Iterable[bool | None]) -> Rate:
    known = [f for f in flags if f is not None]
    return Rate(len(known), sum(known))


def _panel_flag(cells: Mapping[str, Mapping[str, Any]], step: str) -> bool | None:
    known = [f for cell in cells.values() if (f := _flag(cell, step)) is not None]
    return any(known) if known else None


def flag_rates(records: Sequence[RowRecord]) -> dict[str, dict[str, Rate]] | None:
    """Judge (and, with a panel, PANEL) -> {"before": Rate, "after": Rate} over one
    suite's rows; None when no row's ranker answered with flags."""
    rows = [judged_cells(r) for r in records if is_scored(r)]
    if not any(_flag(cell, step) is not None for cells in rows for cell in cells.values() for step in STEPS):
        return None
    names = list(dict.fromkeys(name for cells in rows for name in cells))
    rates = {name: {step: _rate(cells[name].get(f"flagged_{step}") for cells in rows if name in cells)
                    for step in STEPS} for name in names}
    if any(r.get("judges") for r in records):
        rates[PANEL] = {step: _rate(_panel_flag(cells, step) for cells in rows if cells) for step in STEPS}
    return rates


def rates_json(rates: Mapping[str, Mapping[str, Rate]]) -> dict[str, dict[str, Any]]:
    return {name: {step: rate.as_json() for step, rate in steps.items()} for name, steps in rates.items()}


def rate_line(rates: Mapping[str, Mapping[str, Rate]]) -> str:
    """One line: each judge's flag rate before -> after, and the rows counted."""
    shown = [f"{name} {steps['before'].text()} -> {steps['after'].text()} (n={steps['after'].n})"
             for name, steps in rates.items()]
    return "  flagged as questionable (before -> after): " + " | ".join(shown)


def flag_rates_by_suite(records: Iterable[RowRecord]) -> dict[tuple[str, str], dict[str, dict[str, Rate]]]:
    """(suite, split) -> its flag rates, for the suites whose rankers answered with flags."""
    groups: dict[tuple[str, str], list[RowRecord]] = {}
    for record in records:
        if record["kind"] == "geo":
            groups.setdefault((record["suite"], record["split"]), []).append(record)
    found = {key: flag_rates(rows) for key, rows in groups.items()}
    return {key: rates for key, rates in found.items() if rates is not None}


@dataclass(frozen=True)
class AttackCell:
    """One attack and judge (or the panel): the mean improvement and the flag rate after."""

    n: int
    mean: float
    se: float
    flags: Rate

    def as_json(self) -> dict[str, Any]:
        return {"n": self.n, "mean": self.mean, "se": self.se, "flag_rate": self.flags.rate,
                "flag_rate_se": self.flags.se, "flag_n": self.flags.n}

    def text(self, name: str) -> str:
        return f"{name} {cell_text(self.as_json())}"


def cell_text(cell: Mapping[str, Any], pm: str = "+/-") -> str:
    """An attack cell as the JSON report holds it, as the terminal and the HTML show it."""
    return (f"{cell['mean']:+.4f} {pm} {cell['se']:.4f}, flagged {rate_text(cell['flag_rate'])} {pm} "
            f"{rate_text(cell['flag_rate_se'])} (n={cell['n']})")


def _attack_cells(records: Sequence[RowRecord]) -> dict[str, AttackCell]:
    rows = [judged_cells(r) for r in records if is_scored(r)]
    names = list(dict.fromkeys(name for cells in rows for name in cells))
    table = {}
    for name in names:
        mine = [cells[name] for cells in rows if name in cells]
        s = summarize(float(cell["rank_improvement"]) for cell in mine)
        table[name] = AttackCell(s.n, s.mean, s.stderr, _rate(_flag(cell, "after") for cell in mine))
    if any(r.get("judges") for r in records):
        judged = [cells for cells in rows if cells]
        s = summarize(sum(float(c["rank_improvement"]) for c in cells.values()) / len(cells) for cells in judged)
        table[PANEL] = AttackCell(s.n, s.mean, s.stderr, _rate(_panel_flag(cells, "after") for cells in judged))
    return table


@dataclass(frozen=True)
class RedTeam:
    """The packaged attacks run as variants of one suite (and split)."""

    suite: str
    split: str
    attacks: dict[str, dict[str, AttackCell]]  # attack -> judge (and panel) -> its cell

    def as_json(self) -> dict[str, Any]:
        return {"suite": self.suite, "split": self.split,
                "attacks": {attack: {name: cell.as_json() for name, cell in cells.items()}
                            for attack, cells in self.attacks.items()}}

    def lines(self, show_split: bool = False) -> list[str]:
        split = f" [{self.split}]" if show_split else ""
        return [f"red-team attacks of {self.suite}{split} (per judge: mean improvement +/- se, "
                "flag rate after +/- se, rows):",
                *(f"  {attack}: " + " | ".join(cell.text(name) for name, cell in cells.items())
                  for attack, cells in self.attacks.items())]


def red_team(records: Iterable[RowRecord]) -> list[RedTeam]:
    """Each suite (and split) that ran one or more of the packaged attacks as variants
    (by their bare names), the attacks in the order they ran."""
    from pytest_geo.engine.styles import ATTACKS  # here: the plugin loads without the engine

    groups: dict[tuple[str, str], dict[str, list[RowRecord]]] = {}
    for record in records:
        if record["kind"] == "geo" and record.get("variant") in ATTACKS:
            group = groups.setdefault((record["variant_of"], record["split"]), {})
            group.setdefault(record["variant"], []).append(record)
    return [RedTeam(suite, split, {attack: _attack_cells(rows) for attack, rows in attacks.items()})
            for (suite, split), attacks in groups.items()]
