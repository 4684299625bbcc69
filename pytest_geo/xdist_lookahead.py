"""Rows in flight on a pytest-xdist worker.

Without xdist, plugin.py schedules every selected row before the first one runs. A
worker cannot: the controller sends it items a few at a time while it runs. So each time
a worker starts an item, `WorkerLookahead.before` schedules that row and the GEO rows
queued behind it (pytest's `nextitem`, then the worker's queue), keeping up to
2 x `--geo-concurrency` unfinished rows scheduled: the runner runs `--geo-concurrency` of
them at once and the rest start as soon as a slot frees, whichever row the worker is
waiting for.

xdist has no public API for a worker's queue. Its `WorkerInteractor` (a plugin on the
worker's plugin manager; on the worker its module runs under execnet as
`__channelexec__`, so its classes cannot be imported for isinstance checks) holds
`torun`, a `TestQueue` whose `lock()` context manager yields the deque of queued indices
into `session.items` (and possibly a `Marker.SHUTDOWN` sentinel, which is not an int).
We read that duck-typed, under its lock; if it is missing or shaped differently (another
xdist version), the worker falls back to `nextitem`, which pytest passes publicly: two
rows in flight instead of one.

The controller can take queued items back (the `steal` command of `--dist worksteal`).
A stolen row then runs on another worker, so a row scheduled here that has left the
queue without being run is unscheduled (its future cancelled and forgotten: no further
model calls, and a later return of the same item here starts it afresh). Cancelling
cannot unsend requests already made, and worksteal steals from the tail of a queue whose
rows may already be in flight, so with `--dist worksteal` (which the controller passes
to workers in `workerinput`) a worker looks ahead to `nextitem` only: pytest has popped
it from the queue, so it cannot be stolen, and no row is ever sent to the model twice.
"""

from __future__ import annotations

import collections
import concurrent.futures
import itertools
from typing import TYPE_CHECKING, Any, Callable, ContextManager

import pytest

from pytest_geo.items import GeoRowItem

if TYPE_CHECKING:
    from pytest_geo.session import GeoSession

DIST_KEY = "geo_dist"  # workerinput key: the controller's --dist mode
STEALING_MODES = frozenset({"worksteal"})
AHEAD = 2  # unfinished rows kept scheduled, per --geo-concurrency


class LookaheadControllerHooks:
    """Registered on an xdist controller: tells each worker the --dist mode."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        workerinput = getattr(node, "workerinput", None)
        if isinstance(workerinput, dict):
            workerinput[DIST_KEY] = self.config.getoption("dist", None)


QueueLock = Callable[[], ContextManager[Any]]


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
                        return lock
            except Exception:  # not the queue we know
                return None
    return None


class WorkerLookahead:
    def __init__(self, geo: GeoSession, items: list[pytest.Item], lock: QueueLock | None) -> None:
        self.geo = geo
        self.items = items
        self.lock = lock
        self.budget = AHEAD * geo.settings.concurrency
        self.scheduled: dict[str, concurrent.futures.Future[Any]] = {}  # by us, and not yet run
        self.current: str | None = None

    @classmethod
    def for_worker(cls, session: pytest.Session, geo: GeoSession) -> "WorkerLookahead":
        config = session.config
        dist = getattr(config, "workerinput", {}).get(DIST_KEY)
        lock = None if dist in STEALING_MODES else worker_queue_lock(config)
        return cls(geo, session.items, lock)

    def before(self, item: pytest.Item, nextitem: pytest.Item | None) -> None:
        """Called as the worker starts `item`, before it runs."""
        if self.current is not None:
            self.scheduled.pop(self.current, None)  # it ran: GeoSession.outcome forgot it
        self.current = item.nodeid
        if item.session.shouldfail or item.session.shouldstop:
            return
        ahead = [nextitem] if nextitem is not None else []
        queued = self._queued(2 * self.budget)
        if queued is not None:
            self._unschedule_stolen(item, nextitem, queued)
            ahead.extend(queued)
        self._schedule([item, *ahead])

    def _queued(self, limit: int | None) -> list[pytest.Item] | None:
        """The first `limit` items in the worker's queue (all with None), or None when
        the queue cannot be read. The lock is held only to copy the indices."""
        if self.lock is None:
            return None
        with self.lock() as queue:
            if not isinstance(queue, collections.deque):
                return None
            indices = list(queue if limit is None else itertools.islice(queue, limit))
        return [self.items[i] for i in indices if isinstance(i, int) and 0 <= i < len(self.items)]

    def _unschedule_stolen(self, item: pytest.Item, nextitem: pytest.Item | None,
                           queued: list[pytest.Item]) -> None:
        """Rows we scheduled that are neither running, next, nor still queued were taken
        back by the controller: cancel them and forget them."""
        keep = {item.nodeid, nextitem.nodeid if nextitem is not None else None}
        waiting = [key for key in self.scheduled if key not in keep]
        present = {queued_item.nodeid for queued_item in queued}
        if any(key not in present for key in waiting):
            # Rows are scheduled near the head and only move closer to it; look at the
            # whole queue before calling one stolen.
            everything = self._queued(None)
            if everything is None:
                return
            present = {queued_item.nodeid for queued_item in everything}
        stolen = [key for key in waiting if key not in present]
        if stolen:
            self.geo.unschedule(stolen)
            for key in stolen:
                del self.scheduled[key]

    def _schedule(self, candidates: list[pytest.Item]) -> None:
        """Schedule rows in run order until `budget` unfinished ones are scheduled."""
        left = self.budget
        fresh: dict[str, GeoRowItem] = {}
        for candidate in candidates:
            if left <= 0:
                break
            if not isinstance(candidate, GeoRowItem) or candidate.nodeid in fresh:
                continue
            future = self.scheduled.get(candidate.nodeid)
            if future is None:
                fresh[candidate.nodeid] = candidate
                left -= 1
            elif not future.done():
                left -= 1
        # One at a time: schedule() always runs a row in this process and returns its
        # future (schedule_many may hand a big mock batch to a forked helper instead).
        for key, row in fresh.items():
            self.scheduled[key] = self.geo.schedule(key, row.row)
