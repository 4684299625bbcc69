"""How far a run is: rows started, finished, errored and not run, counted on the runner's
event loop, and a snapshot of them with the model usage for a status line.

A row not run (never sent: the model server stopped, the budget was reached; or
cancelled: -x, --maxfail, a decided --geo-sequential comparison) is neither done nor an
error: pytest skips it, and the summary counts it among the rows that did not run.

The main thread reads these while the loop writes them. Plain integer reads need no lock
under the GIL; the usage table is copied with `dict.copy`, which runs in C without
releasing the GIL, so a role added meanwhile cannot break the copy."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from pytest_geo.llm.usage import UsageTable, total_cost


@dataclass
class RowCounts:
    started: int = 0
    ended: int = 0  # started rows that ended, with a result or not
    finished: int = 0  # rows that ran to a result, an error included
    errors: int = 0
    not_run: int = 0  # rows that ended without a result, or were cancelled before they started
    first_started: float | None = None  # perf_counter() of the first row's start


@dataclass(frozen=True)
class Snapshot:
    selected: int
    done: int
    in_flight: int
    errors: int
    retries: int
    tokens: int
    cost_nanousd: int | None  # None: not priced (the mock, or a model without a price)
    elapsed: float  # seconds since the first row started
    not_run: int = 0

    @property
    def eta(self) -> float | None:
        """Seconds left at the rate so far; None before any row finished."""
        if self.done <= 0 or self.elapsed <= 0:
            return None
        return max(self.selected - self.done - self.not_run, 0) * self.elapsed / self.done


def snapshot(rows: RowCounts, usage: UsageTable, selected: int, priced: bool) -> Snapshot:
    table = {role: counts.copy() for role, counts in usage.copy().items()}
    cost = total_cost(table) if priced else None
    started = rows.first_started
    return Snapshot(
        selected=selected, done=rows.finished, in_flight=rows.started - rows.ended, errors=rows.errors,
        not_run=rows.not_run,
        retries=sum(c["retries"] for c in table.values()),
        tokens=sum(c["prompt_tokens"] + c["completion_tokens"] for c in table.values()),
        cost_nanousd=cost[0] if cost is not None else None,
        elapsed=time.perf_counter() - started if started is not None else 0.0,
    )


@dataclass
class RowTracker:
    """Counts rows as the runner runs them; `GeoSession` wraps each row's work in it."""

    counts: RowCounts = field(default_factory=RowCounts)

    def started(self) -> None:
        if self.counts.first_started is None:
            self.counts.first_started = time.perf_counter()
        self.counts.started += 1

    def finished(self, errored: bool) -> None:
        """A started row ran to a result."""
        self.counts.ended += 1
        self.counts.finished += 1
        self.counts.errors += errored

    def stopped(self) -> None:
        """A started row ended without a result: the server stopped or the budget was
        reached before its calls were all sent."""
        self.counts.ended += 1
        self.counts.not_run += 1

    def left(self) -> None:
        """A started row was cancelled (counted as not run where it was cancelled)."""
        self.counts.ended += 1

    def cancelled(self, rows: int) -> None:
        """Rows cancelled, started or not: they will not run."""
        self.counts.not_run += rows
