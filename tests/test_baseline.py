"""Rows compared with a baseline report by node id (report/baseline.py)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.unit


def test_a_baseline_repeating_a_node_id_pairs_none_of_those_rows() -> None:
    from pytest_geo.report.baseline import compare

    suite = {"suite": "s", "metric": "rank_improvement", "split": "train", "score": 1.0}
    rows = [{"suite": "s", "split": "train", "nodeid": n, "score": 1.0} for n in ("f::a", "f::b")]
    baseline = {"suites": [suite], "rows": [{"suite": "s", "nodeid": "f::a", "score": 0.0},
                                            {"suite": "s", "nodeid": "f::a", "score": 2.0},
                                            {"suite": "s", "nodeid": "f::b", "score": 0.0}]}
    (comparison,) = compare([suite], rows, baseline)
    assert comparison.paired is not None and comparison.paired.n == 1
