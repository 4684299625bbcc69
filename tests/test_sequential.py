"""--geo-sequential: the anytime-valid test (its error rate by simulation, its savings),
the rows it stops, and what the reports say."""

from __future__ import annotations

import math
import random

import pytest

from pytest_geo.report.sequential import BETTER, EQUIVALENT, WORSE, ConfidenceSequence
from pytest_geo.report.stopping import simulate, simulated_differences

COMPARISONS = 2000
POOL = 200


def test_no_true_difference_is_decided_wrongly_at_most_alpha_of_the_time() -> None:
    """2,000 seeded comparisons of 200 rows with no true difference, read every 10 rows
    (20 looks: a fixed-sample test read that often would err far more than 5%).

    Tolerance: if the true error rate were exactly 0.05, the count of wrong decisions
    would be Binomial(2000, 0.05): mean 100, sd sqrt(2000 * 0.05 * 0.95) = 9.7. Allowing
    3 sd (129) fails a correct method once in ~700 runs; the seed is fixed, so this run
    either always passes or always fails."""
    rng = random.Random(2025)
    wrong = 0
    for _ in range(COMPARISONS):
        decision, _ = simulate(simulated_differences(rng, POOL, mean=0.0, spread=2.0), bound=9, alpha=0.05)
        wrong += decision in (BETTER, WORSE)
    limit = COMPARISONS * 0.05 + 3 * math.sqrt(COMPARISONS * 0.05 * 0.95)
    assert wrong <= limit, f"{wrong} wrong decisions of {COMPARISONS}, more than {limit:.0f}"
    assert wrong > 0  # the test does bet: it is not trivially never deciding


def test_a_half_rank_difference_is_decided_within_30_percent_of_a_1000_row_pool() -> None:
    """Differences of mean 0.5 rank, spread 2 ranks (40% ties) over 10 candidates."""
    rng = random.Random(7)
    used = []
    for _ in range(40):
        decision, rows = simulate(simulated_differences(rng, 1000, mean=0.5, spread=2.0), bound=9, round_size=16)
        assert decision == BETTER
        used.append(rows)
    assert sum(used) / len(used) <= 300


def test_equivalence_is_decided_once_the_interval_lies_within_the_margin() -> None:
    rng = random.Random(3)
    decision, rows = simulate(simulated_differences(rng, 1000, mean=0.0, spread=1.0), bound=9, margin=0.5)
    assert decision == EQUIVALENT and rows < 1000
    # A true difference of 1 rank is never equivalent within 0.5: it is decided better.
    decision, _ = simulate(simulated_differences(rng, 1000, mean=1.0, spread=1.0), bound=9, margin=0.5)
    assert decision == BETTER


def test_the_interval_narrows_round_by_round_and_agrees_with_the_decision() -> None:
    sequence = ConfidenceSequence(bound=9, horizon=50)
    widths = []
    for _ in range(5):
        for d in [1, 2, 0, 1, 3, 1, 0, 2, 1, 1]:
            sequence.add(d)
        decision = sequence.read()
        widths.append(sequence.high - sequence.low)
        assert (decision == BETTER) == (sequence.low > 0)
    assert widths == sorted(widths, reverse=True) and widths[0] > widths[-1]
    assert sequence.decision == BETTER and 0 < sequence.low < 1.3 < sequence.high < 3


def test_bounds_must_be_positive() -> None:
    with pytest.raises(ValueError, match="must be positive"):
        ConfidenceSequence(bound=0)
