"""Concurrent execution: one background event loop runs the rows' model work, with
at most `concurrency` rows in flight, while pytest reports items in its own order."""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import functools
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from typing import Any, TypeVar

from pytest_geo.engine import gc_pace
from pytest_geo.llm.base import ChatClient
from pytest_geo.llm.limiter import Limiter

T = TypeVar("T")
TASK_MARGIN = 64  # rows given a task beyond twice the row limit (Runner._start_more)
# Windowed rows started and not yet consumed: WINDOW_PER_SLOT x the row limit, at least
# WINDOW_FLOOR (Runner.window).
WINDOW_PER_SLOT = 4
WINDOW_FLOOR = 1024
Queued = tuple[Callable[[], Awaitable[Any]], Future[Any], bool]  # make, future, windowed


class Runner:
    """Rows run on a background loop, at most `slots.limit` at once, started in
    submission order. Windowed rows (a GEO session's) also apply backpressure: they are
    started only while fewer than `window()` of them are started and not yet consumed
    (running, or finished with nobody having taken the outcome), because pytest takes
    outcomes one item at a time and every finished row waiting for it is held in memory.
    A row a consumer waits on is started at once (`hasten`), window or not, so no order
    of consumption can stall the run."""

    def __init__(self, concurrency: int | Limiter, window_floor: int | None = None) -> None:
        gc_pace.hold()  # the collector's pace while rows run (engine/gc_pace.py), until close
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="pytest-geo-runner", daemon=True)
        self._thread.start()
        # Rows in flight; a Limiter rather than a Semaphore so auto concurrency can resize it.
        self.slots = concurrency if isinstance(concurrency, Limiter) else Limiter(concurrency)
        self.window_floor = WINDOW_FLOOR if window_floor is None else window_floor
        # Insertion-ordered (a dict used as a set): cancel_pending walks it newest first.
        self._pending: dict[Future[Any], None] = {}
        self._lock = threading.Lock()
        # Windowed rows started and not yet consumed, the most there ever were, and whether
        # the loop stopped starting rows for the window (all under _lock: either thread).
        self._unconsumed: set[Future[Any]] = set()
        self.most_unconsumed = 0
        self._window_full = False
        # Submitted rows without a task yet, rows started ahead of their turn (hasten),
        # and the tasks started and unfinished (loop thread only).
        self._queued: collections.deque[Queued] = collections.deque()
        self._hastened: set[Future[Any]] = set()
        self._tasks: dict[Future[Any], asyncio.Task[None]] = {}  # started rows' tasks
        self._started = 0
        self.closed = False

    def window(self) -> int:
        """Windowed rows allowed started and not yet consumed; it follows the row limit
        (auto concurrency moves it)."""
        return max(WINDOW_PER_SLOT * self.slots.limit, self.window_floor)

    @property
    def unconsumed(self) -> int:
        with self._lock:
            return len(self._unconsumed)

    def submit(self, make: Callable[[], Awaitable[T]], windowed: bool = False) -> Future[T]:
        """Schedule a row; it starts when a slot is free, in submission order."""
        return self.submit_many([make], windowed)[0]

    def submit_many(self, makers: list[Callable[[], Awaitable[T]]],
                    windowed: bool = False) -> list[Future[T]]:
        """Like `submit` for each, with one wake-up of the loop for the whole batch: at
        10,000 rows, one cross-thread call per row costs more than the mock's work.
        `windowed`: the rows count against the window until `consumed` (or cancelled)."""
        if not makers:
            return []  # no wake-up of the loop for nothing
        futures: list[Future[T]] = [Future() for _ in makers]
        with self._lock:
            self._pending.update(dict.fromkeys(futures))
        for future in futures:
            future.add_done_callback(self._row_done)
        batch: list[Queued] = [(make, future, windowed) for make, future in zip(makers, futures, strict=True)]
        self._loop.call_soon_threadsafe(self._start_all, batch)
        return futures

    def hasten(self, future: Future[Any], make: Callable[[], Awaitable[Any]]) -> None:
        """A consumer is about to wait for `future` (submitted as `make`): if it is still
        queued, start it now, ahead of its turn and beyond the window (else an outcome
        taken out of submission order could wait for a place that only its own
        consumption frees). The caller passes `make` again so no queued row needs an index."""
        if future.done():
            return
        with self._lock:
            if future in self._unconsumed:  # started already: no wake-up of the loop
                return
        if not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._hasten, future, make)

    def consumed(self, future: Future[Any]) -> None:
        """The outcome was taken (or the row is no longer wanted): its window place is
        free. The loop is woken only once an eighth of the window is free again, so a
        consumer taking one outcome at a time costs no cross-thread call per row."""
        with self._lock:
            self._unconsumed.discard(future)
            wake = self._window_full and len(self._unconsumed) <= self.window() - max(1, self.window() // 8)
            if wake:
                self._window_full = False
        if wake and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._start_more)

    def _start_all(self, batch: list[Queued]) -> None:
        self._queued.extend(batch)
        self._start_more()

    def _start_more(self) -> None:
        """Give queued rows their tasks, in submission order, while fewer than twice the
        row limit (plus a margin) are started and unfinished: a row's task, coroutine and
        callbacks exist from shortly before a slot can take it, not from its submission
        (a run submits every row at once). The margin keeps a raised limit fed at once.
        Windowed rows also stop at the window."""
        room = 2 * self.slots.limit + TASK_MARGIN - self._started
        if room <= 0 or not self._queued:
            return
        starting: list[Queued] = []
        with self._lock:  # the cancelled check and the window place taken together (see consumed)
            free = self.window() - len(self._unconsumed)
            while room > 0 and self._queued:
                make, future, windowed = self._queued[0]
                if future.cancelled() or future in self._hastened:
                    self._queued.popleft()
                    self._hastened.discard(future)
                    continue
                if windowed:
                    if free <= 0:
                        self._window_full = True
                        break
                    free -= 1
                    self._unconsumed.add(future)
                self._queued.popleft()
                starting.append((make, future, windowed))
                room -= 1
            self.most_unconsumed = max(self.most_unconsumed, len(self._unconsumed))
        for make, future, _ in starting:
            self._start(make, future)

    def _hasten(self, future: Future[Any], make: Callable[[], Awaitable[Any]]) -> None:
        with self._lock:
            if future.done() or future in self._unconsumed or future in self._hastened:
                return
            self._unconsumed.add(future)
            self.most_unconsumed = max(self.most_unconsumed, len(self._unconsumed))
        self._hastened.add(future)  # its queue entry is skipped when its turn comes
        self._start(make, future)

    def _start(self, make: Callable[[], Awaitable[Any]], future: Future[Any]) -> None:
        self._tasks[future] = self._loop.create_task(self._bounded(make, future))
        self._started += 1

    async def _bounded(self, make: Callable[[], Awaitable[T]], future: Future[T]) -> None:
        """The row's task: its outcome is put on `future` here, at its end."""
        try:
            async with self.slots:
                if future.cancelled():  # cancelled while waiting; its task's cancel may still be in flight
                    raise asyncio.CancelledError
                result = await make()
        except asyncio.CancelledError:  # the future was cancelled (else its waiter hears CancelledError)
            _settle(future, exception=concurrent.futures.CancelledError())
            raise
        except Exception as exc:
            _settle(future, exception=exc)
        except BaseException as exc:  # KeyboardInterrupt / SystemExit: the task ends with it
            _settle(future, exception=exc)
            raise
        else:
            _settle(future, result)
        finally:
            del self._tasks[future]
            self._started -= 1
            self._start_more()

    def _row_done(self, future: Future[Any]) -> None:
        """A row's one done callback (on the thread that finished or cancelled it)."""
        with self._lock:
            self._pending.pop(future, None)
        if future.cancelled():  # -x, Ctrl-C, a row no longer needed: nobody will consume it
            self.consumed(future)
            # A started row's task is cancelled too (one read of the loop's dict: whole under
            # the GIL). A task made just after this read sees the cancel before its work.
            if future in self._tasks and not self._loop.is_closed():
                self._loop.call_soon_threadsafe(self._cancel_task, future)

    def _cancel_task(self, future: Future[Any]) -> None:
        task = self._tasks.get(future)
        if task is not None:
            task.cancel()
            task.add_done_callback(functools.partial(self._cancelled_task_done, future))

    def _cancelled_task_done(self, future: Future[Any], _: asyncio.Task[None]) -> None:
        """A task cancelled before its first step never ran `_bounded`'s `finally`: its
        bookkeeping is done here instead (only then is the row still in `_tasks`)."""
        if self._tasks.pop(future, None) is not None:
            self._started -= 1
            self._start_more()

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
        gc_pace.release()


def _settle(future: Future[T], result: T | None = None, exception: BaseException | None = None) -> None:
    """Finish a row's future, unless it was cancelled meanwhile (from the main thread):
    then its outcome is dropped."""
    with contextlib.suppress(concurrent.futures.InvalidStateError):
        if exception is not None:
            future.set_exception(exception)
        else:
            future.set_result(result)  # type: ignore[arg-type]  # None only with an exception
