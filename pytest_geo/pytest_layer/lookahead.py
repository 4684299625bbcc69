"""Rows scheduled ahead of the item pytest runs, so their model work overlaps.

Without xdist every selected row is known before the first one runs: `RunLookahead`
keeps the rows from the running item to twice the runner's window ahead of it scheduled
(the runner starts at most a window of them), topped up in batches as items run. A run
of 30,000 rows so holds a few thousand scheduled rows (each a future, a parsed row and a
queue entry) instead of 30,000, and no row starts later than it would if all were
scheduled at once.

A worker cannot know its rows: the controller sends it items a few at a time while it runs. So each time
a worker starts an item, `WorkerLookahead.before` schedules that row and the GEO rows
queued behind it (pytest's `nextitem`, then the worker's queue), keeping up to
2 x `--geo-concurrency` unfinished rows scheduled: the runner runs `--geo-concurrency` of
them at once and the rest start as soon as a slot frees.

xdist has no public API for a worker's queue. Its `WorkerInteractor` (a plugin on the
worker's plugin manager) holds `torun`, a `TestQueue` whose `lock()` context manager
yields the deque of queued indices into `session.items`. We read that duck-typed, under
its lock; if it is missing or shaped differently (another xdist version), or under
`--dist worksteal` (whose controller takes queued items back to run elsewhere, so a row
read from the queue could be sent to the model twice), the worker looks ahead to
`nextitem` only, which pytest passes publicly. README: "Concurrency" has the measured gain.
"""

from __future__ import annotations

import collections
import itertools
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import pytest

from pytest_geo.pytest_layer.items import GeoRowItem

if TYPE_CHECKING:
    from pytest_geo.engine.session import GeoSession

DIST_KEY = "geo_dist"  # workerinput key: the controller's --dist mode
STEALING_MODES = frozenset({"worksteal"})
AHEAD = 2  # unfinished rows kept scheduled, per --geo-concurrency

QueueLock = Callable[[], AbstractContextManager[Any]]


def collection_failed(session: pytest.Session) -> str | None:
    """Why no row may start: collection errors, without --continue-on-collection-errors.
    pytest then stops before running anything, but only after the run loop has begun,
    where rows are scheduled; and an xdist worker runs its items regardless. Either way
    the rows would be sent to the model (and billed) for a run that has already failed."""
    errors = session.testsfailed  # before the run loop, only collection errors count here
    if not errors or session.config.option.continue_on_collection_errors:
        return None
    return f"{errors} error{'s' if errors > 1 else ''} during collection"


class LookaheadControllerHooks:
    """Registered on an xdist controller: tells each worker the --dist mode."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        workerinput = getattr(node, "workerinput", None)
        if isinstance(workerinput, dict):
            workerinput[DIST_KEY] = self.config.getoption("dist", None)


def worker_queue_lock(config: pytest.Config) -> QueueLock | None:
    """The `lock` of the xdist worker's TestQueue, if the plugin holding it looks like
    xdist 3.x's WorkerInteractor; None otherwise (the caller uses `nextitem` only)."""
    for plugin in config.pluginmanager.get_plugins():
        torun = getattr(plugin, "torun", None)
        lock = getattr(torun, "lock", None)
        if getattr(plugin, "config", None) is config and callable(lock):
            try:
                with lock() as queue:
                    if isinstance(queue, collections.deque):
                        found: QueueLock = lock
                        return found
            except Exception:  # not the queue we know
                return None
    return None


class RunLookahead:
    """The selected rows in run order (pytest runs `session.items` in order), scheduled
    from the running item to `ahead()` rows beyond it; topped up once the scheduled
    rows ahead fall to half that, with one hand-over to the runner per batch."""

    def __init__(self, geo: GeoSession, rows: list[GeoRowItem]) -> None:
        self.geo = geo
        self.rows = rows
        self.cursor = 0  # the next row pytest is expected to run
        self.end = 0  # rows[:end] are scheduled
        self._schedule_to(self.ahead())

    def ahead(self) -> int:
        """Read each time: under --geo-concurrency auto the runner's window moves."""
        return 2 * self.geo.runner.window()

    def before(self, item: pytest.Item, nextitem: pytest.Item | None = None) -> None:
        """Called as pytest starts `item`. An item met out of order (a rerun) moves
        nothing: whatever row is waited for is scheduled then (`GeoSession.needed`)."""
        if item.session.shouldfail or item.session.shouldstop:
            return
        if self.cursor < len(self.rows) and self.rows[self.cursor] is item:
            self.cursor += 1
            ahead = self.ahead()
            if self.end - self.cursor < ahead // 2:
                self._schedule_to(self.cursor + ahead)

    def _schedule_to(self, end: int) -> None:
        end = min(end, len(self.rows))
        if end > self.end:
            self.geo.schedule_many([item.row for item in self.rows[self.end:end]])
            self.end = end


class WorkerLookahead:
    def __init__(self, geo: GeoSession, items: list[pytest.Item], lock: QueueLock | None) -> None:
        self.geo = geo
        self.items = items
        self.lock = lock
        # Rows never to schedule ahead (--geo-sequential: their comparison is decided).
        self.unwanted: Callable[[pytest.Item], bool] = lambda item: False

    @property
    def budget(self) -> int:
        """Read each time: under --geo-concurrency auto the row limit moves."""
        return AHEAD * self.geo.row_limit()

    @classmethod
    def for_worker(cls, session: pytest.Session, geo: GeoSession) -> WorkerLookahead:
        config = session.config
        dist = getattr(config, "workerinput", {}).get(DIST_KEY)
        lock = None if dist in STEALING_MODES else worker_queue_lock(config)
        return cls(geo, session.items, lock)

    def before(self, item: pytest.Item, nextitem: pytest.Item | None) -> None:
        """Called as the worker starts `item`, before it runs: schedule rows in run order
        until `budget` unfinished ones are scheduled."""
        if item.session.shouldfail or item.session.shouldstop:
            return
        ahead = [item] + ([nextitem] if nextitem is not None else []) + self._queued(2 * self.budget)
        left = self.budget
        fresh = []
        for candidate in dict.fromkeys(ahead):  # each once, in order
            if left <= 0:
                break
            if not isinstance(candidate, GeoRowItem) or self.unwanted(candidate):
                continue
            future = self.geo.scheduled(candidate.row)
            if future is None:
                fresh.append(candidate.row)
                left -= 1
            elif not future.done():
                left -= 1
        self.geo.schedule_many(fresh)

    def _queued(self, limit: int) -> list[pytest.Item]:
        """The first `limit` items in the worker's queue; none when it cannot be read.
        The lock is held only to copy the indices."""
        if self.lock is None:
            return []
        with self.lock() as queue:
            if not isinstance(queue, collections.deque):
                return []
            indices = list(itertools.islice(queue, limit))
        return [self.items[i] for i in indices if isinstance(i, int) and 0 <= i < len(self.items)]
