"""A panel of judges' figures (`--geo-judge`): per judge, the panel, and how far the
judges agree, from the rows' `judges` objects (NAME -> {rank_before, rank_after,
rank_improvement, error, order_before}).

Rows are the unit throughout: a judge's figures are over the rows it scored, the panel's
over each row's mean improvement across the judges that scored it, so a stderr is never
shrunk by counting one row once per judge. Agreement is Krippendorff's alpha (interval)
over the rows' improvements, the mean pairwise Kendall tau of the judges' rankings of the
same original candidates, and the share of rows whose judges all see the same direction
(up, same, down). Every function defines its empty and n < 2 cases: None where a figure
has nothing to measure."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_geo.data.record import RowRecord
from pytest_geo.report.stats import Paired, paired
from pytest_geo.scoring import Summary, summarize

Cells = Mapping[str, Mapping[str, Any]]  # a row's `judges` object


def improvements(cells: Cells) -> dict[str, float]:
    """The improvement of each judge that scored the row (an errored judge's is absent)."""
    return {name: float(cell["rank_improvement"]) for name, cell in cells.items()
            if cell.get("error") is None and cell.get("rank_improvement") is not None}


def panel_value(cells: Cells) -> float | None:
    """The row's improvement averaged over the judges that scored it; None if none did."""
    values = list(improvements(cells).values())
    return sum(values) / len(values) if values else None


def krippendorff_alpha(units: Sequence[Sequence[float | None]]) -> float | None:
    """Krippendorff's alpha, interval metric: 1 - D_o / D_e, where D_o is the mean squared
    difference between values of the same unit (each unit's pairs weighted 1 / (m - 1))
    and D_e between any two pairable values. Only units with two or more values are
    pairable. None with fewer than two pairable values or no spread at all (D_e = 0).
    D_e sums over every two values as 2n times their squared deviations from the mean,
    so 10,000 values (2,000 rows, 5 judges) cost 10,000 steps, not 100 million."""
    pairable = [[float(v) for v in unit if v is not None] for unit in units]
    pairable = [unit for unit in pairable if len(unit) >= 2]
    values = [v for unit in pairable for v in unit]
    n = len(values)
    if n < 2 or min(values) == max(values):
        return None
    observed = sum(sum((a - b) ** 2 for a, b in itertools.permutations(unit, 2)) / (len(unit) - 1)
                   for unit in pairable) / n
    mean = sum(values) / n
    expected = 2 * sum((v - mean) ** 2 for v in values) / (n - 1)
    return 1.0 - observed / expected


def kendall_tau(first: Sequence[str], second: Sequence[str]) -> float | None:
    """Kendall's tau-a of two rankings (ids best first) over the ids both hold:
    (concordant - discordant pairs) / all pairs. None with fewer than two common ids."""
    common = [x for x in first if x in set(second)]
    if len(common) < 2:
        return None
    where = {x: i for i, x in enumerate(second)}
    score = sum(1 if where[a] < where[b] else -1 for a, b in itertools.combinations(common, 2))
    return score / (len(common) * (len(common) - 1) / 2)


def mean_pairwise_tau(rows: Iterable[Cells]) -> float | None:
    """Kendall's tau of every two judges' rankings of a row's original candidates,
    averaged over the judge pairs and rows that have both; None when none has."""
    taus = []
    for cells in rows:
        orders = [cell["order_before"] for cell in cells.values() if cell.get("order_before")]
        for a, b in itertools.combinations(orders, 2):
            tau = kendall_tau(a, b)
            if tau is not None:
                taus.append(tau)
    return sum(taus) / len(taus) if taus else None


def _direction(value: float) -> int:
    return (value > 0) - (value < 0)


def direction_agreement(rows: Iterable[Cells]) -> tuple[float | None, int]:
    """(share of rows whose judges all moved the target the same way: up, same or down;
    the rows counted): only rows two or more judges scored count. None when none did."""
    counted = agreeing = 0
    for cells in rows:
        values = list(improvements(cells).values())
        if len(values) < 2:
            continue
        counted += 1
        agreeing += len({_direction(v) for v in values}) == 1
    return (agreeing / counted if counted else None), counted


def agreement(rows: Sequence[Cells]) -> dict[str, Any]:
    names = list(dict.fromkeys(name for cells in rows for name in cells))
    units = [[improvements(cells).get(name) for name in names] for cells in rows]
    share, counted = direction_agreement(rows)
    return {"krippendorff_alpha": krippendorff_alpha(units), "mean_kendall_tau": mean_pairwise_tau(rows),
            "direction_agreement": share, "direction_rows": counted}


@dataclass(frozen=True)
class Panel:
    """One suite's judges: each judge's summary, the panel's, and the agreement."""

    judges: dict[str, Summary]
    panel: Summary
    agreement: dict[str, Any]

    def as_json(self) -> dict[str, Any]:
        return {"judges": {name: s.as_geo() for name, s in self.judges.items()}, "panel": self.panel.as_geo(),
                "agreement": self.agreement}

    def lines(self, label: str) -> list[str]:
        def metrics(s: Summary) -> str:
            return (f"n={s.n} avg_rank_improvement={s.mean:.4f} win_rate={s.win_rate:.4f} "
                    f"stderr_rank_improvement={s.stderr:.4f}")

        a = self.agreement
        shown = {k: "n/a" if a[k] is None else f"{a[k]:.4f}"
                 for k in ("krippendorff_alpha", "mean_kendall_tau", "direction_agreement")}
        return [f"judges of {label}:",
                *(f"  judge {name}: {metrics(s)}" for name, s in self.judges.items()),
                f"  panel: {metrics(self.panel)}",
                f"  agreement: krippendorff_alpha={shown['krippendorff_alpha']} "
                f"mean_kendall_tau={shown['mean_kendall_tau']} direction_agreement={shown['direction_agreement']} "
                f"(over {a['direction_rows']} rows two or more judges scored)"]


def judged_rows(records: Iterable[RowRecord]) -> list[Cells]:
    return [r["judges"] for r in records if r.get("judges")]


def panel_of(records: Iterable[RowRecord]) -> Panel | None:
    """The panel figures of one suite's records; None when no row was judged by a panel."""
    rows = judged_rows(records)
    if not rows:
        return None
    names = list(dict.fromkeys(name for cells in rows for name in cells))
    judges = {name: summarize(v for cells in rows if (v := improvements(cells).get(name)) is not None)
              for name in names}
    panel = summarize(v for cells in rows if (v := panel_value(cells)) is not None)
    return Panel(judges, panel, agreement(rows))


PANEL = "panel"  # the matrix's column of each row's mean over its judges


def cell_values(records: Iterable[RowRecord], judge: str) -> dict[str, float]:
    """Row id -> the judge's improvement (or, for PANEL, the row's panel value)."""
    values = {}
    for record in records:
        cells = record.get("judges")
        if not cells:
            continue
        value = panel_value(cells) if judge == PANEL else improvements(cells).get(judge)
        if value is not None:
            values[record["nodeid"].removesuffix(f"[{record.get('variant', '')}]")] = value
    return values


def matrix(by_variant: Mapping[str, Sequence[RowRecord]]) -> dict[str, dict[str, dict[str, float | int]]]:
    """Variants x judges (and the panel): each cell's n, mean and stderr over its rows."""
    names = list(dict.fromkeys(n for records in by_variant.values() for cells in judged_rows(records) for n in cells))
    table: dict[str, dict[str, dict[str, float | int]]] = {}
    for variant, records in by_variant.items():
        table[variant] = {}
        for judge in [*names, PANEL]:
            s = summarize(cell_values(records, judge).values())
            table[variant][judge] = {"n": s.n, "mean": s.mean, "stderr": s.stderr}
    return table


def paired_cells(better: Sequence[RowRecord], worse: Sequence[RowRecord], judge: str) -> Paired:
    """`better` minus `worse` for one judge (or the panel), over the rows both scored."""
    a, b = cell_values(better, judge), cell_values(worse, judge)
    both = [row for row in a if row in b]
    return paired([a[r] for r in both], [b[r] for r in both])
