"""The judge's noise floor (`--geo-repeats K >= 2`): how far the ranker moves a target
when nothing but the candidates' order changes.

Each repeat ranks the same original candidates in another seeded order, so the spread of
`rank_before` over a row's K repeats is pure judge noise; the engine keeps it per row as
`judge_noise` (the mean absolute deviation). A suite's noise floor is its rows' mean,
printed beside `avg_rank_improvement`: a gain no larger than it is one the judge could
produce by reshuffling alone. A row that moved by no more than its own noise is counted
as such."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pytest_geo.data.record import RowRecord


@dataclass(frozen=True)
class NoiseFloor:
    rows: int  # rows with a noise estimate (scored without error, at least 2 ranks)
    mean: float  # their mean judge_noise
    moved: int  # of those, rows whose (mean) rank improvement is not 0
    within: int  # ... and is no larger than the row's own judge_noise

    def as_json(self) -> dict[str, Any]:
        return {"judge_noise": self.mean, "judge_noise_rows": self.rows, "rows_moved": self.moved,
                "rows_within_noise": self.within}

    def summary(self) -> str:
        return (f"  judge noise={self.mean:.4f} over {self.rows} rows (rank_before's mean absolute deviation across "
                f"the repeats' orders); {self.within} of {self.moved} moved rows within their own noise")


def within_noise(record: RowRecord) -> bool:
    """A row that moved, by no more than the judge moves it on its own."""
    noise, improvement = record.get("judge_noise"), record.get("rank_improvement")
    return noise is not None and improvement is not None and 0 < abs(improvement) <= noise


def noise_floors(records: Iterable[RowRecord]) -> dict[tuple[str, str], NoiseFloor]:
    """(suite, split) -> its noise floor, for suites whose rows carry a noise estimate."""
    groups: dict[tuple[str, str], list[RowRecord]] = {}
    for record in records:
        if record["kind"] == "geo" and record.get("error") is None and record.get("judge_noise") is not None:
            groups.setdefault((record["suite"], record["split"]), []).append(record)
    floors = {}
    for key, rows in groups.items():
        noise = [float(r["judge_noise"] or 0.0) for r in rows]
        moved = [r for r in rows if r.get("rank_improvement")]
        floors[key] = NoiseFloor(len(rows), sum(noise) / len(noise), len(moved),
                                 sum(1 for r in moved if within_noise(r)))
    return floors
