"""report/judges.py: the agreement statistics against values worked out by hand, and
their empty and n < 2 cases."""

from __future__ import annotations

from typing import Any, cast

import pytest

from pytest_geo.data.record import RowRecord
from pytest_geo.report.judges import (
    agreement,
    direction_agreement,
    kendall_tau,
    krippendorff_alpha,
    matrix,
    mean_pairwise_tau,
    panel_of,
    panel_value,
)

pytestmark = pytest.mark.unit


def cell(improvement: int | None, error: str | None = None, order: list[str] | None = None) -> dict[str, Any]:
    return {"rank_before": None, "rank_after": None, "rank_improvement": improvement, "error": error,
            "order_before": order or []}


def test_alpha_of_a_small_table_worked_by_hand() -> None:
    """Units [1, 2] and [3, 3]: D_o = (1 + 1) / 1 / 4 = 0.5; the pairable values 1, 2, 3,
    3 differ by 1, 4, 4, 1, 1, 0 squared in each direction: D_e = 22 / 12; alpha = 8/11."""
    assert krippendorff_alpha([[1, 2], [3, 3]]) == pytest.approx(8 / 11)


def test_alpha_leaves_out_missing_values_and_units_with_one_value() -> None:
    """[1, None, 2] and [3, 3] as above; [9] has nothing to pair with."""
    assert krippendorff_alpha([[1, None, 2], [3, 3, None], [9], [None, None]]) == pytest.approx(8 / 11)


def test_alpha_of_three_coders_worked_by_hand() -> None:
    """Units [2, -2, 2] three times: each unit's six ordered pairs sum to 64, over m - 1 = 2:
    D_o = 3 * 32 / 9; six 2s and three -2s differ in 36 ordered pairs of 16: D_e = 576 / 72."""
    assert krippendorff_alpha([[2, -2, 2]] * 3) == pytest.approx(1 - (96 / 9) / 8)


def test_alpha_is_one_when_coders_agree_and_none_without_anything_to_measure() -> None:
    assert krippendorff_alpha([[1, 1], [3, 3], [-2, -2]]) == 1.0
    assert krippendorff_alpha([]) is None
    assert krippendorff_alpha([[1], [2]]) is None  # no unit with two values
    assert krippendorff_alpha([[2, 2], [2, 2]]) is None  # no spread: D_e = 0


def test_alpha_of_2000_rows_pairs_values_only_within_a_row(monkeypatch: pytest.MonkeyPatch) -> None:
    """E-GEO's full run: 2,000 rows of 5 judges. D_e over every two of its 10,000 values
    is computed from their deviations: only a row's own 20 ordered pairs are drawn, not
    the 100 million of every two values (minutes of CPU at the end of a run). Rows
    alternate [0, 1, 2, 3, 4] and [4, 3, 2, 1, 0]: a row's ordered pairs differ by 100
    squared, over m - 1 = 4 and 5 values a row: D_o = 5; the values 0..4, 2,000 each,
    deviate by 20,000 squared: D_e = 2 * 20,000 / 9,999."""
    from pytest_geo.report import judges

    drawn = 0
    permutations = judges.itertools.permutations

    def counted(values: list[float], r: int) -> list[tuple[float, ...]]:
        nonlocal drawn
        pairs = list(permutations(values, r))
        drawn += len(pairs)
        return pairs

    monkeypatch.setattr(judges.itertools, "permutations", counted)
    rows = [[0, 1, 2, 3, 4], [4, 3, 2, 1, 0]] * 1000
    assert krippendorff_alpha(rows) == pytest.approx(1 - 5 / (2 * 20_000 / 9_999))
    assert drawn == 2000 * 20


def test_kendall_tau_worked_by_hand() -> None:
    assert kendall_tau(["a", "b", "c"], ["a", "b", "c"]) == 1.0
    assert kendall_tau(["a", "b", "c"], ["c", "b", "a"]) == -1.0
    # (a,b) and (a,c) concordant, (b,c) discordant: (2 - 1) / 3
    assert kendall_tau(["a", "b", "c"], ["a", "c", "b"]) == pytest.approx(1 / 3)
    # four items, one swap of neighbours: (5 - 1) / 6
    assert kendall_tau(["a", "b", "c", "d"], ["b", "a", "c", "d"]) == pytest.approx(4 / 6)


def test_kendall_tau_over_the_common_ids_and_none_below_two() -> None:
    assert kendall_tau(["a", "b", "x"], ["b", "a", "y"]) == -1.0
    assert kendall_tau(["a"], ["a"]) is None
    assert kendall_tau([], []) is None


def test_mean_pairwise_tau_and_direction_agreement() -> None:
    rows = [
        {"p": cell(2, order=["a", "b", "c"]), "q": cell(1, order=["a", "b", "c"]), "r": cell(-1, order=["c", "b", "a"])},
        {"p": cell(0, order=["a", "b"]), "q": cell(0, order=["a", "b"]), "r": cell(None, "down")},
        {"p": cell(3), "q": cell(None, "down")},  # one judge scored it: no direction to agree on
    ]
    # row 1: p-q 1, p-r -1, q-r -1; row 2: p-q 1 (r has no ranking): (1 - 1 - 1 + 1) / 4
    assert mean_pairwise_tau(rows) == 0.0
    assert direction_agreement(rows) == (0.5, 2)  # row 1 up, up, down; row 2 same, same
    assert mean_pairwise_tau([]) is None and direction_agreement([]) == (None, 0)
    assert agreement([]) == {"krippendorff_alpha": None, "mean_kendall_tau": None, "direction_agreement": None,
                             "direction_rows": 0}


def test_panel_value_is_the_mean_over_the_judges_that_scored() -> None:
    assert panel_value({"p": cell(2), "q": cell(-1), "r": cell(None, "boom")}) == 0.5
    assert panel_value({"p": cell(None, "boom")}) is None
    assert panel_value({}) is None


def record(nodeid: str, cells: dict[str, Any], variant: str | None = None) -> RowRecord:
    """The part of a row's record the panel figures read."""
    found: dict[str, Any] = {"nodeid": nodeid + (f"[{variant}]" if variant else ""), "judges": cells}
    if variant:
        found["variant"] = variant
    return cast(RowRecord, found)


def test_panel_of_counts_rows_once_whatever_the_judges() -> None:
    records = [record("d::r0", {"p": cell(2), "q": cell(0)}), record("d::r1", {"p": cell(4), "q": cell(None, "x")}),
               record("d::r2", {"p": cell(None, "x"), "q": cell(None, "x")})]
    panel = panel_of(records)
    assert panel is not None
    assert (panel.judges["p"].n, panel.judges["p"].mean, panel.judges["q"].n, panel.judges["q"].mean) == (2, 3.0, 1, 0.0)
    assert (panel.panel.n, panel.panel.mean) == (2, 2.5)  # rows 1 and 4; the row nobody scored is left out
    assert panel_of([]) is None


def test_matrix_cells_are_mean_stderr_and_n_per_variant_and_judge() -> None:
    table = matrix({"x": [record("d::r0", {"p": cell(2), "q": cell(0)}, "x"),
                          record("d::r1", {"p": cell(4), "q": cell(2)}, "x")],
                    "y": [record("d::r0", {"p": cell(1), "q": cell(None, "e")}, "y")]})
    assert table["x"]["p"] == {"n": 2, "mean": 3.0, "stderr": 1.0}
    assert table["x"]["panel"] == {"n": 2, "mean": 2.0, "stderr": 1.0}
    assert table["y"]["q"] == {"n": 0, "mean": 0.0, "stderr": 0.0} and table["y"]["panel"]["mean"] == 1.0
