"""A scheduled row's outcome, as the main thread takes it: the part of
`concurrent.futures.Future` the runner and its callers use, without its cost per row.

A `concurrent.futures.Future` builds a `threading.Condition` of its own (an RLock, a deque
and its bound methods: eleven objects in all for the garbage collector to walk while the
row waits in the window, against two here) and takes it, in Python, for every `done()`, `cancelled()`, callback and
result. A run makes one future per row, and the main thread reads each several times, so
here every row future shares one lock and one condition: the state is read without the
lock (one attribute, read whole under the GIL), changed under it, and the condition is
notified only when a thread waits on that future. A row's future is only ever pending,
cancelled or finished (the runner settles it once its task has ended), which is all a
caller can tell apart anyway. `concurrent.futures.wait` and `as_completed` do not take it
(they read a Future's private parts): wait with `result(timeout)` or `exception(timeout)`."""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar, final

T = TypeVar("T")

PENDING, CANCELLED, FINISHED = 0, 1, 2

_lock = threading.Lock()
_changed = threading.Condition(_lock)  # notified when a future some thread waits on is settled or cancelled
_logger = logging.getLogger("concurrent.futures")  # where concurrent.futures reports a failing callback


@final
class RowFuture(Generic[T]):
    __slots__ = ("_state", "_result", "_exception", "_callbacks", "_waiters")

    def __init__(self) -> None:
        self._state = PENDING
        self._result: T | None = None
        self._exception: BaseException | None = None
        self._callbacks: list[Callable[[RowFuture[T]], object]] = []
        self._waiters = 0  # threads waiting in result() / exception(), counted under the lock

    def done(self) -> bool:
        return self._state != PENDING

    def cancelled(self) -> bool:
        return self._state == CANCELLED

    def running(self) -> bool:
        return False  # settled at once when its task ends: never seen running

    def cancel(self) -> bool:
        """Cancel unless finished; True if it is (or was already) cancelled."""
        with _lock:
            if self._state != PENDING:
                return self._state == CANCELLED
            self._state = CANCELLED
            if self._waiters:
                _changed.notify_all()
        self._call_back()
        return True

    def settle(self, result: T | None, exception: BaseException | None = None) -> bool:
        """Finish with `result` (or `exception`); False, and nothing changed, if it was
        cancelled meanwhile."""
        with _lock:
            if self._state != PENDING:
                return False
            self._result, self._exception = result, exception
            self._state = FINISHED
            if self._waiters:
                _changed.notify_all()
        self._call_back()
        return True

    def add_done_callback(self, fn: Callable[[RowFuture[T]], object]) -> None:
        """`fn(self)` once done (at once if it is), on the thread that settled or cancelled it."""
        with _lock:
            if self._state == PENDING:
                self._callbacks.append(fn)
                return
        self._call(fn)

    def result(self, timeout: float | None = None) -> T:
        exception = self.exception(timeout)
        if exception is not None:
            raise exception
        return self._result  # type: ignore[return-value]  # finished without an exception: its result

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """As `concurrent.futures.Future.exception`: waits up to `timeout`; raises
        CancelledError if cancelled, TimeoutError if still pending."""
        if self._state == PENDING:
            self._wait(timeout)
        if self._state == CANCELLED:
            raise concurrent.futures.CancelledError()
        if self._state == PENDING:
            raise concurrent.futures.TimeoutError()  # the builtin TimeoutError from Python 3.11 on
        return self._exception

    def _wait(self, timeout: float | None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        with _changed:
            self._waiters += 1
            try:
                while self._state == PENDING:  # any future's settling wakes every waiter: check ours
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        return
                    _changed.wait(left)
            finally:
                self._waiters -= 1

    def _call_back(self) -> None:
        callbacks, self._callbacks = self._callbacks, []
        for fn in callbacks:
            self._call(fn)

    def _call(self, fn: Callable[[RowFuture[T]], object]) -> None:
        try:
            fn(self)
        except Exception:
            _logger.exception("exception calling callback for %r", self)

    def __repr__(self) -> str:
        return f"<RowFuture {('pending', 'cancelled', 'finished')[self._state]}>"

