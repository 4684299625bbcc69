"""Concurrent execution: one background event loop runs the rows' model work, with
at most `concurrency` rows in flight, while pytest reports items in its own order."""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import functools
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from pytest_geo.engine.limiter import Limiter
from pytest_geo.llm.base import ChatClient, ChatRequest, ChatResponse

T = TypeVar("T")
TASK_MARGIN = 64  # rows given a task beyond twice the row limit (Runner._start_more)


class BoundedClient:
    """At most `limit` model requests in flight at once, whoever sends them; a Limiter
    given as `limit` can be resized meanwhile (--geo-concurrency auto), and
    `on_success` hears how long every call that came back at its first attempt took
    (a retried call's time is mostly the wait a 429 or an error imposed, not the server's
    pace)."""

    def __init__(self, inner: ChatClient, limit: int | Limiter,
                 on_success: Callable[[float], None] | None = None) -> None:
        self.inner = inner
        self._slots = limit if isinstance(limit, Limiter) else Limiter(limit)
        self._on_success = on_success

    async def complete(self, request: ChatRequest) -> ChatResponse:
        async with self._slots:
            started = time.perf_counter()
            response = await self.inner.complete(request)
        if self._on_success is not None and not response.retries:
            self._on_success(time.perf_counter() - started)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


def _copy_outcome(future: concurrent.futures.Future[Any], task: asyncio.Task[Any]) -> None:
    """A finished task's result onto the future the main thread waits on (unless it was
    cancelled meanwhile)."""
    if not future.set_running_or_notify_cancel():
        return
    if task.cancelled():
        future.set_exception(concurrent.futures.CancelledError())
    elif task.exception() is not None:
        future.set_exception(task.exception())
    else:
        future.set_result(task.result())


class Runner:
    def __init__(self, concurrency: int | Limiter) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="pytest-geo-runner", daemon=True)
        self._thread.start()
        # Rows in flight; a Limiter rather than a Semaphore so auto concurrency can resize it.
        self.slots = concurrency if isinstance(concurrency, Limiter) else Limiter(concurrency)
        # Insertion-ordered (a dict used as a set): cancel_pending walks it newest first.
        self._pending: dict[concurrent.futures.Future[Any], None] = {}
        self._lock = threading.Lock()
        # Submitted rows without a task yet, and the tasks started and unfinished (loop thread only).
        self._queued: collections.deque[tuple[Callable[[], Awaitable[Any]], concurrent.futures.Future[Any]]] = (
            collections.deque())
        self._started = 0
        self.closed = False

    def submit(self, make: Callable[[], Awaitable[T]]) -> concurrent.futures.Future[T]:
        """Schedule a row; it starts when a slot is free, in submission order."""
        return self.submit_many([make])[0]

    def submit_many(self, makers: list[Callable[[], Awaitable[T]]]) -> list[concurrent.futures.Future[T]]:
        """Like `submit` for each, with one wake-up of the loop for the whole batch: at
        10,000 rows, one cross-thread call per row costs more than the mock's work."""
        if not makers:
            return []  # no wake-up of the loop for nothing
        futures: list[concurrent.futures.Future[T]] = [concurrent.futures.Future() for _ in makers]
        with self._lock:
            self._pending.update(dict.fromkeys(futures))
        for future in futures:
            future.add_done_callback(self._forget)
        self._loop.call_soon_threadsafe(self._start_all, list(zip(makers, futures, strict=True)))
        return futures

    def _start_all(self, batch: list[tuple[Callable[[], Awaitable[Any]], concurrent.futures.Future[Any]]]) -> None:
        self._queued.extend(batch)
        self._start_more()

    def _start_more(self) -> None:
        """Give queued rows their tasks, in submission order, while fewer than twice the
        row limit (plus a margin) are started and unfinished: a row's task, coroutine and
        callbacks exist from shortly before a slot can take it, not from its submission
        (a run submits every row at once). The margin keeps a raised limit fed at once."""
        room = 2 * self.slots.limit + TASK_MARGIN - self._started
        while room > 0 and self._queued:
            make, future = self._queued.popleft()
            if future.cancelled():
                continue
            task = self._loop.create_task(self._bounded(make, future))
            self._started += 1
            room -= 1
            task.add_done_callback(functools.partial(_copy_outcome, future))
            task.add_done_callback(self._task_done)
            future.add_done_callback(functools.partial(self._cancel_task, task))

    def _task_done(self, _: asyncio.Task[Any]) -> None:
        self._started -= 1
        self._start_more()

    async def _bounded(self, make: Callable[[], Awaitable[T]], future: concurrent.futures.Future[T]) -> T:
        async with self.slots:
            if future.cancelled():  # cancelled while waiting; its task's cancel may still be in flight
                raise asyncio.CancelledError
            return await make()

    def _cancel_task(self, task: asyncio.Task[Any], future: concurrent.futures.Future[Any]) -> None:
        if future.cancelled() and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(task.cancel)

    def _forget(self, future: concurrent.futures.Future[Any]) -> None:
        with self._lock:
            self._pending.pop(future, None)

    def run(self, awaitable: Awaitable[T], timeout: float | None = None) -> T:
        """Run one coroutine on the loop and wait for it (outside the row bound)."""

        async def wrap() -> T:
            return await awaitable

        return asyncio.run_coroutine_threadsafe(wrap(), self._loop).result(timeout)

    def cancel_pending(self) -> int:
        """Cancel every row not yet finished (after -x, --maxfail or Ctrl-C), newest
        first: rows wait for slots in submission order, so every waiting row is cancelled
        before a running one frees its slot."""
        with self._lock:
            pending = list(reversed(self._pending))
        return sum(1 for future in pending if future.cancel())

    def close(self, client: ChatClient | None = None) -> None:
        if self.closed:
            return
        self.closed = True
        self.cancel_pending()
        if client is not None:
            try:
                self.run(client.aclose(), timeout=5)
            except Exception:  # closing is best effort; the results are already in
                pass
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self._loop.close()
