"""Scores and their aggregates: metric-return normalisation, n, mean, win rate, stderr."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from numbers import Real
from typing import Any

from pytest_geo.text import shorten


@dataclass(frozen=True)
class Score:
    """One row's score: the value, optional feedback, and whether it came from an error
    (with the exception the metric raised, if it raised, for its traceback)."""

    value: float
    feedback: str = ""
    error: bool = False
    raised: BaseException | None = field(default=None, compare=False, repr=False)

    @classmethod
    def from_error(cls, exc: BaseException | str, raised: BaseException | None = None) -> Score:
        message = exc if isinstance(exc, str) else (str(exc) or type(exc).__name__)
        return cls(0.0, f"error: {message}", True, raised)


class MetricReturnError(TypeError):
    """A metric returned something that is not a bool, a number or (score, feedback)."""


def normalize(returned: Any) -> Score:
    """Kedi's rules: bool -> 1.0/0.0, any number coercible to float -> float (not
    clamped), (score, feedback). A number is a `numbers.Real`, a `Decimal`, or any other
    value with `__float__` (numpy scalars, say); a string is not, even "0.5"."""
    if isinstance(returned, bool):
        return Score(1.0 if returned else 0.0)
    if _is_number(returned):
        try:
            value = float(returned)
        except (TypeError, ValueError, OverflowError) as exc:
            raise MetricReturnError(
                f"metric returned {shorten_repr(returned)}, not coercible to float: {exc}") from None
        if not math.isfinite(value):
            # A NaN would make the suite's mean NaN, which no threshold can fail.
            raise MetricReturnError(f"metric returned {value}")
        return Score(value)
    if isinstance(returned, tuple) and len(returned) == 2:
        value, feedback = returned
        inner = normalize(value)
        return Score(inner.value, "" if feedback is None else str(feedback))
    raise MetricReturnError(
        f"metric returned {type(returned).__name__} {shorten_repr(returned)}; "
        "expected a bool, a number or (score, feedback)"
    )


def _is_number(value: Any) -> bool:
    if isinstance(value, (Real, Decimal)):
        return True
    return hasattr(type(value), "__float__") and not isinstance(value, (str, bytes, bytearray, tuple))


def shorten_repr(value: Any, limit: int = 80) -> str:
    return shorten(repr(value), limit)


@dataclass(frozen=True)
class Summary:
    n: int
    mean: float
    win_rate: float
    stderr: float

    def as_geo(self) -> dict[str, float | int]:
        """The E-GEO names, as `egeo evaluate` prints them."""
        return {
            "n": self.n,
            "avg_rank_improvement": self.mean,
            "win_rate": self.win_rate,
            "stderr_rank_improvement": self.stderr,
        }


def summarize(values: Iterable[float]) -> Summary:
    """n, mean, share of values > 0, and sample stddev / sqrt(n) (0.0 when n < 2).

    The arithmetic is the E-GEO harness's, operation for operation (plain sums in order,
    sqrt(variance / n)), so `egeo evaluate` prints its summary to the last digit."""
    data: Sequence[float] = [float(v) for v in values]
    n = len(data)
    if n == 0:
        return Summary(0, 0.0, 0.0, 0.0)
    mean = sum(data) / n
    wins = sum(1 for v in data if v > 0) / n
    if n < 2:
        return Summary(n, mean, wins, 0.0)
    variance = sum((v - mean) ** 2 for v in data) / (n - 1)
    return Summary(n, mean, wins, math.sqrt(variance / n))
