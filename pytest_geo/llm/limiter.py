"""A resizable semaphore with a pause: what the adaptive concurrency controller turns.

`asyncio.Semaphore` has a fixed size. Here the limit can move while holders are inside
(lowering it only makes newcomers wait until enough holders left) and new entries can be
held back until a time (a server's `Retry-After`), and so can the requests of holders
not yet sent (`hold`). Waiters enter first come, first served, so rows still start in
submission order."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable
from types import TracebackType


class Limiter:
    def __init__(self, limit: int) -> None:
        self._limit = max(1, limit)
        self.in_use = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._paused_until = 0.0
        self._wake_scheduled: asyncio.TimerHandle | None = None

    @property
    def limit(self) -> int:
        return self._limit

    @property
    def waiting(self) -> int:
        """Entrants waiting for a slot (or for the pause to end)."""
        return len(self._waiters)

    def resize(self, limit: int) -> None:
        self._limit = max(1, limit)
        self._wake()

    def pause_until(self, when: float) -> None:
        """No new entry before `when` (the running loop's clock); holders are not touched."""
        self._paused_until = max(self._paused_until, when)

    def paused_until(self) -> float:
        return self._paused_until

    def hold(self) -> Awaitable[None] | None:
        """For a holder about to send its request: the wait until the pause is over, or
        None when there is none. A slot taken before a pause began does not make its
        request welcome: the server asked for quiet, whoever got in first."""
        if self._paused_until <= asyncio.get_running_loop().time():
            return None
        return self._pause_over()

    async def _pause_over(self) -> None:
        loop = asyncio.get_running_loop()
        while self._paused_until > loop.time():  # a later 429 can extend it meanwhile
            await asyncio.sleep(self._paused_until - loop.time())

    async def acquire(self) -> None:
        # the loop (a getpid call to find) and its clock are read only when a pause was
        # ever set (it is 0.0 until then) or the entrant must wait
        if not self._waiters and self.in_use < self._limit and (
                not self._paused_until or self._paused_until <= asyncio.get_running_loop().time()):
            self.in_use += 1
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        self._wake()
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # granted just as we were cancelled: hand the slot on
            elif waiter in self._waiters:  # else a wake-up already dropped it as done
                self._waiters.remove(waiter)
            raise

    async def requeue(self) -> None:
        """Give a held slot back and queue for one again, behind the pause and the
        waiters: a request the server refused waits its turn instead of retrying past
        everyone. The caller still holds a slot afterwards (also when cancelled meanwhile,
        so its own release stays balanced)."""
        self.release()
        try:
            await self.acquire()
        except asyncio.CancelledError:
            self.in_use += 1  # re-counted for the caller's own release
            raise

    def release(self) -> None:
        self.in_use -= 1
        if self._waiters:  # else nobody to wake (no call: a release per model call)
            self._wake()

    def _wake(self) -> None:
        """Grant slots to waiters in order while there is room and no pause."""
        if not self._waiters:
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        if self._paused_until > now:
            if self._wake_scheduled is None or self._wake_scheduled.when() < self._paused_until:
                if self._wake_scheduled is not None:
                    self._wake_scheduled.cancel()
                self._wake_scheduled = loop.call_at(self._paused_until, self._timer_wake)
            return
        while self._waiters and self.in_use < self._limit:
            waiter = self._waiters.popleft()
            if not waiter.done():
                self.in_use += 1
                waiter.set_result(None)

    def _timer_wake(self) -> None:
        self._wake_scheduled = None
        self._wake()

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.release()
