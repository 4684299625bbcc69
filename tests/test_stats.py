"""Statistics without scipy, against published table values and hand-computed cases."""

from __future__ import annotations

import math

import pytest

from pytest_geo.report.numbers import column_decimals, format_ci, format_p
from pytest_geo.report.stats import (
    confidence_interval,
    incomplete_beta,
    is_proportion,
    movement,
    paired,
    sign_test,
    t_cdf,
    t_quantile,
    wilson_interval,
)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("p", "df", "expected"),
    [(0.975, 1, 12.706), (0.975, 2, 4.303), (0.975, 5, 2.571), (0.975, 10, 2.228), (0.975, 30, 2.042),
     (0.975, 120, 1.980), (0.95, 10, 1.812), (0.995, 4, 4.604)],
)
def test_t_quantile_matches_the_table(p: float, df: int, expected: float) -> None:
    assert t_quantile(p, df) == pytest.approx(expected, abs=5e-4)


def test_t_quantile_is_symmetric_and_inverts_the_cdf() -> None:
    assert t_quantile(0.025, 10) == pytest.approx(-t_quantile(0.975, 10))
    assert t_cdf(t_quantile(0.9, 7), 7) == pytest.approx(0.9, abs=1e-10)
    assert t_cdf(0.0, 3) == 0.5
    with pytest.raises(ValueError):
        t_quantile(1.0, 3)


def test_incomplete_beta_known_values() -> None:
    assert incomplete_beta(1, 1, 0.3) == pytest.approx(0.3)  # uniform
    assert incomplete_beta(2, 3, 0.4) == pytest.approx(0.5248)  # 1 - sum of binomial terms
    assert incomplete_beta(0.5, 0.5, 0.5) == pytest.approx(0.5)


def test_confidence_interval() -> None:
    assert confidence_interval(1.0, 0.5, 1) is None
    low, high = confidence_interval(2.0, 0.5, 11) or (0, 0)
    assert (low, high) == pytest.approx((2.0 - 2.228139 * 0.5, 2.0 + 2.228139 * 0.5))


def test_sign_test_exact_binomial() -> None:
    assert sign_test(8, 0) == pytest.approx(1 / 256)
    assert sign_test(7, 1) == pytest.approx(9 / 256)
    assert sign_test(0, 0) == 1.0
    assert sign_test(3, 1, "two-sided") == pytest.approx(0.625)
    assert sign_test(0, 6, "two-sided") == pytest.approx(2 / 64)
    assert sign_test(2, 2, "two-sided") == 1.0
    big = sign_test(5100, 4900)  # exact big-integer arithmetic stays fast at 10,000 rows
    assert 0.02 < big < 0.03


def test_movement_drops_ties_from_the_sign_test() -> None:
    moved = movement([2, 1, 0, 0, -1])
    assert moved.as_json() == {"moved_up": 0.4, "unchanged": 0.4, "moved_down": 0.2,
                               "sign_test_p": pytest.approx(0.5)}  # P(X >= 2 | n = 3)
    assert movement([]).as_json()["sign_test_p"] == 1.0


def test_paired_comparison() -> None:
    result = paired([1, 2, 3, 0], [0, 2, 1, 1])
    # diffs 1, 0, 2, -1: mean 0.5, sample sd sqrt(5/3), stderr sqrt(5/3)/2
    assert result.n == 4 and result.mean_diff == 0.5
    assert result.stderr == pytest.approx(math.sqrt(5 / 3) / 2)
    assert (result.up, result.down) == (2, 1)
    assert result.sign_test_p == pytest.approx(1.0)
    assert not result.significant_drop()
    drop = paired([0] * 6, [1] * 6)
    assert drop.sign_test_p == pytest.approx(1 / 32) and drop.significant_drop()
    assert not paired([0] * 5, [1] * 5).significant_drop()  # p = 1/16: not enough rows



@pytest.mark.parametrize(
    ("successes", "n", "expected"),
    # Wilson score intervals at 95% (Newcombe 1998, table I; Agresti & Coull 1998)
    [(0, 10, (0.0, 0.2775)), (5, 10, (0.2366, 0.7634)), (8, 10, (0.4902, 0.9433)), (10, 10, (0.7225, 1.0)),
     (1, 1, (0.2065, 1.0)), (81, 263, (0.2553, 0.3662))],
)
def test_wilson_interval_matches_published_values(successes: int, n: int, expected: tuple[float, float]) -> None:
    assert wilson_interval(successes, n) == pytest.approx(expected, abs=5e-4)


def test_wilson_interval_stays_within_bounds_where_t_does_not() -> None:
    assert wilson_interval(0, 0) is None
    for n in range(1, 30):
        for k in range(n + 1):
            low, high = wilson_interval(k, n) or (math.nan, math.nan)
            assert 0.0 <= low <= k / n <= high <= 1.0
    # three rows of accuracy 1, 0, 1: mean ± t·stderr leaves [0, 1]
    t_low, t_high = confidence_interval(2 / 3, math.sqrt(1 / 3) / math.sqrt(3), 3) or (0.0, 0.0)
    assert t_low < 0 and t_high > 1
    assert is_proportion([1.0, 0.0, 1.0]) and not is_proportion([1.0, 0.5]) and not is_proportion([])


@pytest.mark.parametrize(
    ("p", "text"),
    [(3.725290298461914e-09, "3.7e-09"), (0.0009765625, "9.8e-04"), (0.001, "0.0010"), (0.0078125, "0.0078"),
     (0.25, "0.2500"), (1.0, "1.0000"), (0.0, "0.0000"), (None, "")],
)
def test_p_values_read_in_fixed_decimals_or_scientific_when_small(p: float | None, text: str) -> None:
    assert format_p(p) == text


def test_a_column_has_one_number_of_decimals() -> None:
    assert column_decimals([1.0, 3.0, None]) == 0
    assert column_decimals([1.0, 2.5]) == 2
    assert format_ci([-0.5, 1.25]) == "[-0.5000, 1.2500]" and format_ci(None) == "n/a"
