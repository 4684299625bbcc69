"""`rank_before` once per row (and repeat), shared by the row's variants.

`rank_before` ranks the original candidates: it does not depend on the rewriter, so V
variants of a row need it once, not V times (calls per row 1 + 2V instead of 3V). The
first variant to need it starts it as a task on the runner's loop; the others await the
same task through `asyncio.shield`, so one variant cancelled (-x) never cancels it for the
rest. The session says how many variants of a row it scheduled (`expect`) and each
variant's end (`release`, from any thread); when the last one ends the tasks are dropped,
and cancelled if nobody is left to wait for them."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any, NamedTuple, TypeVar

from pytest_geo.data.dataset import GeoRow, SourceKey
from pytest_geo.data.record import ModelCall


class Place(NamedTuple):
    """The target's place in a ranking: its rank (1-based), and whether the ranker listed
    it as questionable (None: the ranker's answer has no such list)."""

    rank: int
    flagged: bool | None = None


Ranked = tuple[Place, tuple[ModelCall, ...]]  # the target's place, and the calls that produced it
R = TypeVar("R")


class SharedRanks:
    def __init__(self) -> None:
        self._lock = threading.Lock()  # expect runs on pytest's thread, release on either
        self._users: dict[SourceKey, int] = {}
        self._tasks: dict[tuple[SourceKey, int, str], asyncio.Task[Any]] = {}

    def expect(self, row: GeoRow) -> None:
        """A variant of `row` is scheduled: keep its shared ranks until it ends."""
        with self._lock:
            self._users[row.source_key] = self._users.get(row.source_key, 0) + 1

    def release(self, row: GeoRow) -> None:
        with self._lock:
            left = self._users.get(row.source_key, 0) - 1
            if left > 0:
                self._users[row.source_key] = left
                return
            self._users.pop(row.source_key, None)
            dropped = [self._tasks.pop(k) for k in [k for k in self._tasks if k[0] == row.source_key]]
        for task in dropped:
            if not task.done():
                task.get_loop().call_soon_threadsafe(task.cancel)

    async def rank(self, row: GeoRow, repeat: int, start: Callable[[], Coroutine[Any, Any, R]], judge: str = "") -> R:
        """The shared rank of `row` in repeat `repeat` (by `judge`, with a panel), started
        with `start()` by the first variant that asks (on the runner's loop)."""
        key = (row.source_key, repeat, judge)
        with self._lock:
            task = self._tasks.get(key)
            if task is None:
                task = asyncio.ensure_future(start())
                if row.source_key in self._users:  # else nobody else will ask: not kept
                    self._tasks[key] = task
        ranked: R = await asyncio.shield(task)
        return ranked

    def __len__(self) -> int:
        """Shared ranks kept (finished or not): none once every scheduled variant ended."""
        with self._lock:
            return len(self._tasks)
