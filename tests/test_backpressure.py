"""The runner's window: windowed rows (a GEO session's) are started only while few enough
are started and not yet consumed, and no consumption order, slow row or cancel stalls it."""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import PROMPTS, SMOKE
from pytest_geo.data.dataset import GeoRow, iter_dataset
from pytest_geo.engine.runner import Runner
from pytest_geo.engine.session import GeoSession
from pytest_geo.settings import Settings


def _until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.002)


@pytest.mark.unit
def test_rows_started_and_not_consumed_stay_within_the_window() -> None:
    runner = Runner(concurrency=2, window_floor=0)  # window: 4 x 2 rows
    counts = {"began": 0, "consumed": 0, "most": 0}

    async def job(i: int) -> int:
        counts["began"] += 1
        counts["most"] = max(counts["most"], counts["began"] - counts["consumed"])
        await asyncio.sleep(0)
        return i * 10

    try:
        assert runner.window() == 8
        futures = runner.submit_many([functools.partial(job, i) for i in range(200)], windowed=True)
        results = []
        for future in futures:  # a slow consumer: the rows finish long before they are taken
            results.append(future.result(timeout=30))
            counts["consumed"] += 1
            runner.consumed(future)
            time.sleep(0.001)
    finally:
        runner.close()
    assert results == [i * 10 for i in range(200)]
    assert counts["most"] == 8 and runner.most_unconsumed == 8  # not twice the limit plus 64
    assert runner.unconsumed == 0


@pytest.mark.unit
def test_a_slow_head_row_holds_only_the_window_and_its_consumer_gets_it() -> None:
    runner = Runner(concurrency=2, window_floor=0)
    head = threading.Event()
    began: list[int] = []

    async def job(i: int) -> int:
        began.append(i)
        while i == 0 and not head.is_set():
            await asyncio.sleep(0.001)
        return i

    try:
        futures = runner.submit_many([functools.partial(job, i) for i in range(50)], windowed=True)
        _until(lambda: len(began) == 8)
        time.sleep(0.1)
        assert len(began) == 8 and runner.unconsumed == 8  # the head and 7 finished rows behind it
        head.set()
        taken = []
        for future in futures:
            taken.append(future.result(timeout=30))
            runner.consumed(future)
    finally:
        head.set()
        runner.close()
    assert taken == list(range(50))


@pytest.mark.unit
def test_rows_taken_in_reverse_order_all_finish() -> None:
    runner = Runner(concurrency=1, window_floor=0)  # window: 4 rows
    makers = [functools.partial(asyncio.sleep, 0, i) for i in range(300)]
    try:
        futures = runner.submit_many(makers, windowed=True)
        taken = []
        for make, future in reversed(list(zip(makers, futures, strict=True))):
            runner.hasten(future, make)  # the last rows are still queued behind the window
            taken.append(future.result(timeout=30))
            runner.consumed(future)
    finally:
        runner.close()
    assert taken == list(range(299, -1, -1))


def _smoke_session(tmp_path: Path) -> tuple[GeoSession, list[GeoRow]]:
    settings = Settings(prompts_dir=PROMPTS, mock=True, concurrency=1)
    session = GeoSession(settings)
    session.runner.window_floor = 0  # window: 4 rows of the 8
    return session, [r for r in iter_dataset(SMOKE, 7) if isinstance(r, GeoRow)]


@pytest.mark.unit
def test_a_session_taking_outcomes_in_reverse_order_finishes(tmp_path: Path) -> None:
    session, rows = _smoke_session(tmp_path)
    try:
        in_order = [o.record()["rank_after"] for o in session.evaluate(rows)]
        session.schedule_many(rows)
        reverse = [session.outcome(row).record()["rank_after"] for row in reversed(rows)]
    finally:
        session.close()
    assert reverse == in_order[::-1]
    assert session.runner.unconsumed == 0


@pytest.mark.unit
def test_cancelled_rows_free_their_window_places(tmp_path: Path) -> None:
    session, rows = _smoke_session(tmp_path)
    try:
        futures = session.schedule_many(rows)
        _until(lambda: all(f.done() for f in futures[:4]))
        time.sleep(0.05)
        assert session.runner.unconsumed == 4 and not futures[4].done()  # held by the window
        for row in rows[:4]:  # finished, never taken (as --geo-sequential's "not needed")
            session.cancel(row)
        assert all(f.result(timeout=10).error is None for f in futures[4:])
        assert session.cancel_pending() == 0 and session.runner.unconsumed == 4
    finally:
        session.close()

    runner = Runner(concurrency=1, window_floor=0)
    gate = threading.Event()

    async def blocked() -> None:
        while not gate.is_set():
            await asyncio.sleep(0.001)

    try:
        futures = runner.submit_many([blocked] * 20, windowed=True)
        _until(lambda: runner.unconsumed == 4)
        assert runner.cancel_pending() == 20  # -x, Ctrl-C, fail fast, a budget stop
        assert runner.unconsumed == 0
        gate.set()
        time.sleep(0.05)  # the cancelled tasks end before the loop stops
    finally:
        gate.set()
        runner.close()


@pytest.mark.unit
def test_the_window_follows_the_row_limit() -> None:
    runner = Runner(concurrency=1, window_floor=0)
    try:
        futures = runner.submit_many([functools.partial(asyncio.sleep, 0, i) for i in range(40)], windowed=True)
        _until(lambda: futures[3].done())
        time.sleep(0.05)
        assert runner.unconsumed == 4 and not futures[4].done()
        runner.slots.resize(3)  # what auto concurrency does
        assert runner.window() == 12
        runner.consumed(futures[0])
        _until(lambda: futures[12].done())
        time.sleep(0.05)
        assert runner.unconsumed == 12 and not futures[13].done()
    finally:
        runner.close()


REVERSED_CONFTEST = '''
import json
import pytest
import pytest_geo.engine.runner
from pytest_geo.pytest_layer.state import running_session

pytest_geo.engine.runner.WINDOW_FLOOR = 0  # the window: 4 x --geo-concurrency 1 = 4 rows of 8

@pytest.hookimpl(wrapper=True)
def pytest_runtestloop(session):
    session.items.reverse()  # after pytest-geo scheduled them: taken in the reverse order
    return (yield)

def pytest_sessionfinish(session):
    geo = running_session(session.config)
    (session.config.rootpath / "window.json").write_text(json.dumps(
        [geo.runner.window(), geo.runner.unconsumed]))
'''


@pytest.mark.e2e
def test_items_run_in_reverse_of_scheduling_finish(geo_project: pytest.Pytester) -> None:
    geo_project.makeconftest(REVERSED_CONFTEST)
    result = geo_project.runpytest_subprocess("data/smoke.jsonl", "--geo-mock", "--geo-concurrency", "1",
                                              "-p", "no:xdist", timeout=120)
    result.assert_outcomes(passed=8)
    assert (geo_project.path / "window.json").read_text() == "[4, 0]"


SKIPPED_CONFTEST = REVERSED_CONFTEST.replace('''@pytest.hookimpl(wrapper=True)
def pytest_runtestloop(session):
    session.items.reverse()  # after pytest-geo scheduled them: taken in the reverse order
    return (yield)''', '''def pytest_collection_modifyitems(items):
    for item in items[:5]:
        item.add_marker(pytest.mark.skip(reason="not this time"))''')


@pytest.mark.e2e
def test_rows_of_skipped_items_do_not_keep_their_window_places(geo_project: pytest.Pytester) -> None:
    geo_project.makeconftest(SKIPPED_CONFTEST)
    result = geo_project.runpytest_subprocess("data/smoke.jsonl", "--geo-mock", "--geo-concurrency", "1",
                                              "-p", "no:xdist", timeout=120)
    result.assert_outcomes(passed=3, skipped=5)
    assert (geo_project.path / "window.json").read_text() == "[4, 0]"


@pytest.mark.unit
def test_a_row_cancelled_before_its_task_first_runs_gives_its_task_place_back() -> None:
    """A row's bookkeeping (its task place, its entry among the started tasks) is undone
    at the end of its task's coroutine; a task cancelled before its first step never
    enters that coroutine, and the runner must still undo it, or each such row would
    hold a task place for the rest of the run."""
    runner = Runner(concurrency=1, window_floor=0)
    ran: list[str] = []

    async def job(name: str) -> str:
        ran.append(name)
        return name

    def cancel_ahead_of_first_step() -> None:  # on the loop: the cancel is queued before the task's first step
        future: concurrent.futures.Future[str] = concurrent.futures.Future()
        runner._loop.call_soon(runner._cancel_task, future)
        runner._start(functools.partial(job, "cancelled"), future)
        future.cancel()

    try:
        runner._loop.call_soon_threadsafe(cancel_ahead_of_first_step)
        after = runner.submit(functools.partial(job, "after"))
        assert after.result(timeout=10) == "after"
        _until(lambda: runner._started == 0)
        assert ran == ["after"] and runner._tasks == {}
    finally:
        runner.close()
