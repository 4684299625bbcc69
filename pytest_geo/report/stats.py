"""Statistics for aggregates, without scipy: Student's t quantile (through the regularized
incomplete beta function), 95% confidence intervals (t for means, Wilson for proportions),
exact sign tests, row movement and paired comparisons."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

from pytest_geo.scoring import summarize

__all__ = [
    "Movement",
    "Paired",
    "confidence_interval",
    "movement",
    "paired",
    "is_proportion",
    "sign_test",
    "t_cdf",
    "t_quantile",
    "wilson_interval",
]

_EPS = 3e-16
_TINY = 1e-300


def _beta_continued_fraction(a: float, b: float, x: float) -> float:
    """Lentz's method for the continued fraction of I_x(a, b) (Numerical Recipes 6.4)."""
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, 1000):
        m2 = 2 * m
        for numerator in (
            m * (b - m) * x / ((qam + m2) * (a + m2)),
            -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > _TINY else _TINY)
            c = 1.0 + numerator / c
            c = c if abs(c) > _TINY else _TINY
            h *= d * c
        if abs(d * c - 1.0) < _EPS:
            break
    return h


def incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_continued_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_continued_fraction(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with `df` degrees of freedom."""
    tail = 0.5 * incomplete_beta(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The t value with P(T <= t) = p, found by bisection on the exact CDF."""
    if not 0.0 < p < 1.0 or df <= 0:
        raise ValueError("t_quantile needs 0 < p < 1 and df > 0")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    low, high = 0.0, 1.0
    while t_cdf(high, df) < p:
        low, high = high, high * 2.0
    for _ in range(200):
        mid = (low + high) / 2.0
        if t_cdf(mid, df) < p:
            low = mid
        else:
            high = mid
        if high - low < 1e-12 * max(1.0, high):
            break
    return (low + high) / 2.0


def confidence_interval(mean: float, stderr: float, n: int, level: float = 0.95) -> tuple[float, float] | None:
    """mean ± t((1 + level) / 2, n - 1) · stderr; None when n < 2 (no spread to measure)."""
    if n < 2:
        return None
    half = t_quantile((1.0 + level) / 2.0, n - 1) * stderr
    return (mean - half, mean + half)


def wilson_interval(successes: int, n: int, level: float = 0.95) -> tuple[float, float] | None:
    """The Wilson score interval of a proportion: always within [0, 1], and sensible at
    small n and at 0 or n successes, where mean ± t·stderr leaves [0, 1] or collapses to
    a point. None when n == 0."""
    if n <= 0:
        return None
    z = NormalDist().inv_cdf((1.0 + level) / 2.0)
    p, z2 = successes / n, z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z / (1 + z2 / n) * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    # exact at the ends (the formula gives 0 and 1 there, up to rounding)
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == n else min(1.0, centre + half)
    return (low, high)


def is_proportion(scores: Sequence[float]) -> bool:
    """Scores that are all 0 or 1 (bool metrics, pass/fail) make the mean a proportion."""
    return bool(scores) and all(s in (0.0, 1.0) for s in scores)


def _binomial_tail(k: int, n: int) -> float:
    """P(X >= k) for X ~ Binomial(n, 1/2), exactly (big integers, then one division)."""
    if k <= 0:
        return 1.0
    if k > n:
        return 0.0
    term = total = math.comb(n, k)
    for i in range(k, n):
        term = term * (n - i) // (i + 1)
        total += term
    return total / (1 << n)


def sign_test(ups: int, downs: int, alternative: str = "greater") -> float:
    """Exact sign test with ties already dropped. `greater`: are ups more likely than
    downs (one-sided); `two-sided`: do they differ at all."""
    n = ups + downs
    if n == 0:
        return 1.0
    if alternative == "greater":
        return _binomial_tail(ups, n)
    if alternative == "two-sided":
        return min(1.0, 2.0 * min(_binomial_tail(ups, n), _binomial_tail(downs, n)))
    raise ValueError(f"unknown alternative {alternative!r}")


@dataclass(frozen=True)
class Movement:
    """How rows moved: shares of values above, at and below zero, and the one-sided sign
    test for "moves targets up" (ties dropped)."""

    n: int
    up: int
    unchanged: int
    down: int

    @property
    def sign_test_p(self) -> float:
        return sign_test(self.up, self.down, "greater")

    def as_json(self) -> dict[str, Any]:
        share = (lambda k: k / self.n) if self.n else (lambda k: 0.0)
        return {
            "moved_up": share(self.up),
            "unchanged": share(self.unchanged),
            "moved_down": share(self.down),
            "sign_test_p": self.sign_test_p,
        }


def movement(values: Iterable[float]) -> Movement:
    data = [float(v) for v in values]
    up = sum(1 for v in data if v > 0)
    down = sum(1 for v in data if v < 0)
    return Movement(len(data), up, len(data) - up - down, down)


@dataclass(frozen=True)
class Paired:
    """This run against a baseline over the rows both have: differences now - before."""

    n: int
    mean_diff: float
    stderr: float
    up: int
    down: int

    @property
    def sign_test_p(self) -> float:
        return sign_test(self.up, self.down, "two-sided")

    def significant_drop(self, alpha: float = 0.05) -> bool:
        return self.mean_diff < 0 and self.sign_test_p < alpha

    def as_json(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "mean_diff": self.mean_diff,
            "stderr": self.stderr,
            "improved": self.up,
            "worsened": self.down,
            "unchanged": self.n - self.up - self.down,
            "sign_test_p": self.sign_test_p,
        }


def paired(now: Sequence[float], before: Sequence[float]) -> Paired:
    diffs = [float(a) - float(b) for a, b in zip(now, before, strict=True)]
    summary, moved = summarize(diffs), movement(diffs)
    return Paired(summary.n, summary.mean, summary.stderr, moved.up, moved.down)
