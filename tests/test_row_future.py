"""RowFuture: what the runner's callers rely on from a concurrent future, with one lock
and one condition shared by every row's future."""

from __future__ import annotations

import concurrent.futures
import threading
import time

import pytest

from pytest_geo.engine.row_future import RowFuture

pytestmark = pytest.mark.unit


def _later(seconds: float, action: object) -> threading.Thread:
    def run() -> None:
        time.sleep(seconds)
        action()  # type: ignore[operator]

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_a_waiter_gets_the_result_or_the_exception_settled_on_another_thread() -> None:
    future: RowFuture[int] = RowFuture()
    thread = _later(0.05, lambda: future.settle(42))
    assert future.result(timeout=10) == 42 and future.done() and not future.cancelled()
    thread.join()

    failing: RowFuture[int] = RowFuture()
    thread = _later(0.05, lambda: failing.settle(None, ValueError("row failed")))
    with pytest.raises(ValueError, match="row failed"):
        failing.result(timeout=10)
    assert isinstance(failing.exception(), ValueError)
    thread.join()


def test_another_rows_settling_does_not_end_a_wait() -> None:
    """Every row future shares one condition: a waiter woken by another row's outcome
    waits on for its own, up to its timeout."""
    mine: RowFuture[str] = RowFuture()
    others: list[RowFuture[str]] = [RowFuture() for _ in range(5)]
    thread = _later(0.02, lambda: [f.settle("other") for f in others])
    started = time.monotonic()
    with pytest.raises(concurrent.futures.TimeoutError):
        mine.result(timeout=0.3)
    assert time.monotonic() - started >= 0.29 and not mine.done()
    thread.join()
    assert [f.result() for f in others] == ["other"] * 5


def test_cancel_wakes_a_waiter_and_a_late_outcome_is_refused() -> None:
    future: RowFuture[int] = RowFuture()
    thread = _later(0.05, future.cancel)
    with pytest.raises(concurrent.futures.CancelledError):
        future.result(timeout=10)
    thread.join()
    assert future.cancelled() and future.cancel()  # cancelled stays cancelled
    assert future.settle(1) is False  # the row's task ended after its cancel: its outcome is dropped
    with pytest.raises(concurrent.futures.CancelledError):
        future.exception(timeout=0)

    finished: RowFuture[int] = RowFuture()
    assert finished.settle(7) and finished.cancel() is False and finished.result() == 7
    assert finished.settle(8) is False and finished.result() == 7  # settled once


def test_done_callbacks_run_once_each_and_a_failing_one_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    future: RowFuture[int] = RowFuture()
    seen: list[str] = []

    def broken(_: RowFuture[int]) -> None:
        raise RuntimeError("callback broke")

    future.add_done_callback(lambda f: seen.append(f"first {f.result()}"))
    future.add_done_callback(broken)
    future.add_done_callback(lambda f: seen.append("third"))
    assert seen == []
    future.settle(3)
    future.cancel()
    assert seen == ["first 3", "third"]
    future.add_done_callback(lambda f: seen.append("after"))  # done already: at once
    assert seen == ["first 3", "third", "after"]
    assert "exception calling callback" in caplog.text and "callback broke" in caplog.text

    cancelled: RowFuture[int] = RowFuture()
    cancelled.add_done_callback(lambda f: seen.append(f"cancelled {f.cancelled()}"))
    cancelled.cancel()
    cancelled.cancel()
    assert seen[-1] == "cancelled True" and seen.count("cancelled True") == 1
