"""An anytime-valid test of paired differences (`--geo-sequential`): a betting confidence
sequence for a bounded mean, after Waudby-Smith & Ramdas, "Estimating means of bounded
random variables by betting" (JRSS-B, 2024).

Why betting: a gambler bets a fraction lambda of her capital on each difference d
against a hypothesised mean m, and her capital prod(1 + lambda * (d - m)) is a
nonnegative (super)martingale while m is the truth. Ville's inequality bounds the
chance that it EVER reaches 1/alpha by alpha, so the test may be read after every round
and stopped whenever it is decided: optional stopping keeps the error rate. Differences
are bounded (|d| <= bound: a rank moves at most candidates - 1 places), which is all the
method assumes besides rows drawn in an order the outcomes cannot influence (the seed).

Two gamblers per m (one betting up, one down), each at alpha / 2: the confidence
sequence is every m neither has beaten, intersected over the rounds read. Bets do not
depend on m (only their caps do, in a way that keeps each capital monotone in m), so
the set is an interval, found by bisection, and a decision reads it directly:

- the interval lies above 0: the first variant is better; below 0: the second is;
- with a margin M, the interval lies inside [-M, M]: equivalent within M.

At most one of those is false for any true mean, and each needs the interval to miss
it, so P(any false decision) <= alpha whenever the run stops."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

__all__ = ["BETTER", "EQUIVALENT", "WORSE", "ConfidenceSequence", "guarantee"]

BETTER = "better"  # the mean difference is above 0
WORSE = "worse"  # below 0
EQUIVALENT = "equivalent"  # inside [-margin, margin]
CAP = 0.75  # most of the capital bet at once, as a share of what keeps it nonnegative
PRIOR_WEIGHT = 1.0  # pseudo-observations behind the variance estimate's prior
BISECTIONS = 40


@dataclass
class ConfidenceSequence:
    """Differences `d` with |d| <= `bound`, added in a data-independent order; `read()`
    after each round updates the interval and says whether it is decided.

    The bet on each row is the predictable plug-in of the paper's empirical-Bernstein
    betting CS: sqrt(2 log(2/alpha) / (variance so far * horizon)), where the horizon is
    the rows available (a bet tuned to the pool, valid whatever it is) and the variance
    estimate starts from the bound's worst case."""

    bound: float
    alpha: float = 0.05
    margin: float | None = None
    horizon: int = 1000
    differences: list[float] = field(default_factory=list)
    bets: list[float] = field(default_factory=list)
    low: float = field(init=False)
    high: float = field(init=False)
    # Running log capital at the points decisions read: up/down at 0, up at -margin, down at +margin.
    _log: dict[str, float] = field(default_factory=lambda: dict.fromkeys(("up0", "down0", "up_m", "down_m"), 0.0))
    _crossed: set[str] = field(default_factory=set)
    _mean: float = 0.0
    _variance: float = 0.0

    def __post_init__(self) -> None:
        if self.bound <= 0:
            raise ValueError(f"the bound of the differences must be positive, not {self.bound}")
        self.low, self.high = -self.bound, self.bound
        self._variance = self.bound * self.bound  # the widest spread a [-B, B] variable can have
        self._threshold = math.log(2 / self.alpha)

    @property
    def n(self) -> int:
        return len(self.differences)

    def add(self, difference: float) -> None:
        d = max(-self.bound, min(self.bound, float(difference)))
        bet = math.sqrt(2 * self._threshold / (self._variance * max(self.horizon, 1)))
        self.differences.append(d)
        self.bets.append(bet)
        margin = self.margin or 0.0
        self._log["up0"] += math.log1p(self._up_bet(bet, 0.0) * d)
        self._log["down0"] += math.log1p(-self._down_bet(bet, 0.0) * d)
        if self.margin is not None:
            self._log["up_m"] += math.log1p(self._up_bet(bet, -margin) * (d + margin))
            self._log["down_m"] += math.log1p(-self._down_bet(bet, margin) * (d - margin))
        # The running mean and variance (with the prior as pseudo-observations): the next bet's.
        t = self.n
        self._mean += (d - self._mean) / (t + PRIOR_WEIGHT)
        self._variance += ((d - self._mean) ** 2 - self._variance) / (t + PRIOR_WEIGHT)
        self._variance = max(self._variance, 1e-6 * self.bound * self.bound)

    def _up_bet(self, bet: float, m: float) -> float:
        """1 + bet * (d - m) stays positive for every d >= -bound."""
        return min(bet, CAP / max(self.bound + m, 1e-12))

    def _down_bet(self, bet: float, m: float) -> float:
        return min(bet, CAP / max(self.bound - m, 1e-12))

    def _log_capital(self, m: float, up: bool) -> float:
        total = 0.0
        for d, bet in zip(self.differences, self.bets, strict=True):
            total += math.log1p(self._up_bet(bet, m) * (d - m)) if up else math.log1p(-self._down_bet(bet, m) * (d - m))
        return total

    def read(self, interval: bool = True) -> str | None:
        """After a round: the decision, or None while undecided; and the interval,
        intersected with the earlier rounds' (`interval=False` skips it: a simulation
        needs only the decision, which reads the running capitals at 0 and +-margin)."""
        for key, value in self._log.items():
            if value >= self._threshold:
                self._crossed.add(key)
        if interval:
            self.low = max(self.low, self._edge(up=True))
            self.high = min(self.high, self._edge(up=False))
        return self.decision

    def _edge(self, up: bool) -> float:
        """The interval's lower end (up=True: the up-bettor's capital falls as m rises, so
        it has beaten every m below the end) or upper end, within the running interval."""
        beaten, kept = (self.low, self.high) if up else (self.high, self.low)
        if self.low >= self.high or not self._beaten(beaten, up):
            return beaten
        if self._beaten(kept, up):
            return kept
        for _ in range(BISECTIONS):
            middle = (beaten + kept) / 2
            if self._beaten(middle, up):
                beaten = middle
            else:
                kept = middle
        return beaten

    def _beaten(self, m: float, up: bool) -> bool:
        return self._log_capital(m, up) >= self._threshold

    @property
    def decision(self) -> str | None:
        if "up0" in self._crossed:
            return BETTER
        if "down0" in self._crossed:
            return WORSE
        if self.margin is not None and {"up_m", "down_m"} <= self._crossed:
            return EQUIVALENT
        return None

    @property
    def mean(self) -> float:
        return sum(self.differences) / self.n if self.n else 0.0

    def as_json(self) -> dict[str, Any]:
        return {"n": self.n, "mean_diff": self.mean, "interval": [self.low, self.high], "bound": self.bound}


def guarantee(alpha: float) -> str:
    level = f"{100 * (1 - alpha):g}%"
    return (f"with probability at least {level}, the interval held the true mean difference after every round, "
            f"so stopping as soon as it was decided keeps the chance of a wrong decision at or below "
            f"{100 * alpha:g}%")
