"""Which rows a sequential comparison still needs (report/stopping.py)."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_geo.report.stopping import Monitor, build_monitor, simulate

pytestmark = pytest.mark.unit

ROWS = 400


def a_score(unit: str) -> float:
    """Variant a gains one rank on every third row; b and c gain nothing."""
    return 1.0 if int(unit.removeprefix("rows.jsonl::r")) % 3 == 0 else 0.0


def run(variants: list[str]) -> Monitor:
    rows: list[Any] = [{"nodeid": f"rows.jsonl::r{i}[{v}]", "suite": f"rows.jsonl[{v}]", "split": "test",
                        "unit": f"rows.jsonl::r{i}", "variant": v, "candidates": 3}
                       for i in range(ROWS) for v in variants]
    monitor = build_monitor(rows, seed=1, alpha=0.05, margin=None, concurrency=1, variants=variants)
    for row in rows:
        score = a_score(row["unit"]) if row["variant"] == "a" else 0.0
        monitor.add({"nodeid": row["nodeid"], "score": score, "error": None})  # type: ignore[typeddict-item]
    return monitor


def test_three_variants_share_alpha_so_no_pair_decides_sooner_than_the_corrected_test() -> None:
    """Three pairs share alpha = 0.05 (Bonferroni): each pair is tested at 0.05 / 3, and
    decides where that test does, later than a test at 0.05 would."""
    (comparison,) = run(["a", "b", "c"]).comparisons
    differences = [a_score(unit) for unit, _ in comparison.units]  # a - b and a - c, in the seeded order
    assert simulate(differences, bound=2, alpha=0.05 / 3) == ("better", 50)
    assert simulate(differences, bound=2, alpha=0.05) == ("better", 40)
    assert {(p.first, p.second): (p.verdict, p.decided_after) for p in comparison.pairs} == {
        ("a", "b"): ("a better than b", 50), ("a", "c"): ("a better than c", 50), ("b", "c"): ("undecided", None)}


def test_two_variants_are_one_pair_tested_at_the_whole_alpha() -> None:
    (comparison,) = run(["a", "b"]).comparisons
    [pair] = comparison.pairs
    assert (pair.verdict, pair.decided_after) == ("a better than b", 40)
