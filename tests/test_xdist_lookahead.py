"""xdist workers keep rows in flight: real worker processes against the fake OpenAI
server (in this process; workers reach it over TCP, the key comes from the env), and the
queue reading driven directly with xdist's own queue."""

from __future__ import annotations

import asyncio
import collections
import json
import re
import threading
import time
from contextlib import nullcontext
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from conftest import PROMPTS, GeoProject, geo_rows, without_run_dependent
from pytest_geo.engine.session import GeoSession
from pytest_geo.llm.base import ChatRequest, ChatResponse
from pytest_geo.llm.mock import MockClient
from pytest_geo.llm.stack import build_stack
from pytest_geo.pytest_layer.lookahead import WorkerLookahead, worker_queue_lock
from pytest_geo.settings import Settings

xdist_remote = pytest.importorskip("xdist.remote")
execnet = pytest.importorskip("execnet")

QUERY = re.compile(r"^(?:Shopper query|Query): red kettle number (\d+)$", re.MULTILINE)


def session_over(client: MockClient, concurrency: int) -> GeoSession:
    settings = Settings(prompts_dir=PROMPTS, concurrency=concurrency)
    return GeoSession(settings, build_stack(settings, client))


def row_of(body: dict[str, Any]) -> int:
    user = next(m["content"] for m in body["messages"] if m["role"] == "user")
    match = QUERY.search(user)
    assert match, user
    return int(match.group(1))


def requests_per_row(project: GeoProject) -> collections.Counter[int]:
    return collections.Counter(row_of(r["body"]) for r in project.server.requests)


def run(project: GeoProject, dataset: Path, name: str, *args: str) -> pytest.RunResult:
    """No answer cache: every run asks the server, so requests can be counted."""
    return project.pytester.runpytest(
        str(dataset), "--geo-base-url", project.server.url, "--geo-no-cache", "-p", "no:cacheprovider",
        "--geo-report", f"{name}.json", *args,
    )


def results(project: GeoProject, name: str) -> tuple[Any, list[Any]]:
    report = json.loads((project.pytester.path / f"{name}.json").read_text(encoding="utf-8"))
    rows = sorted(without_run_dependent(report["rows"]), key=lambda r: r["nodeid"])
    return report["geo"], rows


@pytest.mark.xdist
def test_workers_run_queued_rows_concurrently(served_project: GeoProject) -> None:
    # --dist load hands each worker 48 // 2 // 4 = 6 rows at first. Looking ahead to
    # `nextitem` only would put at most 2 rows (4 requests) in flight per worker, 8 in
    # all; a worker that runs its queued rows too puts up to 6 rows (12 requests) in flight.
    n = 48
    dataset = served_project.dataset(n)
    run(served_project, dataset, "single", "-p", "no:xdist", "--geo-concurrency", "6").assert_outcomes(passed=n)
    assert requests_per_row(served_project) == {i: 3 for i in range(n)}
    served_project.server.reset()
    served_project.server.latency = 0.1
    served_project.server.hold_until = 9  # requests wait for more than nextitem alone could send
    result = run(served_project, dataset, "spread", "-n", "2", "--geo-concurrency", "6")
    result.assert_outcomes(passed=n)
    result.stdout.fnmatch_lines(["*2 workers*"])
    assert 8 < served_project.server.max_in_flight <= 2 * 2 * 6  # 2 workers, 2 requests a row
    assert requests_per_row(served_project) == {i: 3 for i in range(n)}  # no row ran twice
    assert results(served_project, "spread") == results(served_project, "single")


@pytest.mark.xdist
def test_the_issue_case_more_than_two_requests_per_worker(served_project: GeoProject) -> None:
    # The issue's numbers: without lookahead 2 workers x 2 requests was the most.
    served_project.server.latency = 0.1
    served_project.server.hold_until = 5  # requests wait for more than 2 workers x 2 requests
    result = run(served_project, served_project.dataset(16), "spread", "-n", "2", "--geo-concurrency", "4")
    result.assert_outcomes(passed=16)
    assert 4 < served_project.server.max_in_flight <= 2 * 2 * 4
    assert requests_per_row(served_project) == {i: 3 for i in range(16)}


WHO_RAN = '''
import json

RAN = {}

def pytest_runtest_logreport(report):
    node = getattr(report, "node", None)  # set on the controller for a worker's report
    if report.when == "call" and node is not None:
        RAN[report.nodeid] = node.gateway.id

def pytest_sessionfinish(session):
    if not hasattr(session.config, "workerinput"):
        (session.config.rootpath / "ran.json").write_text(json.dumps(RAN))
'''


@pytest.mark.xdist
def test_worksteal_runs_every_row_once(served_project: GeoProject) -> None:
    # worksteal gives rows 0-7 to one worker and 8-15 to the other. Rows 8-15 are held at
    # the server until the first worker has sent all its calls and a third row of 8-15 has
    # arrived: under worksteal a worker schedules its item and `nextitem` only, so that row
    # was stolen. No fixed delay has to outlast a loaded machine's start-up; if nothing is
    # stolen, the held calls wait out hold_seconds and `released` stays unset.
    served_project.pytester.makeconftest(WHO_RAN)
    server = served_project.server
    enter = server._enter
    arrived: list[int] = []

    def second_half_waits_for_a_thief(body: dict[str, Any], headers: dict[str, str]) -> None:
        enter(body, headers)
        with server.lock:
            arrived.append(row_of(body))
            first_half_sent = sum(row < 8 for row in arrived) >= 8 * 3
            if first_half_sent and len({row for row in arrived if row >= 8}) > 2:
                server.released.set()
        if row_of(body) >= 8:
            time.sleep(0.3)  # and stay slow: the rows the second worker has left start before it is done

    server._enter = second_half_waits_for_a_thief  # type: ignore[method-assign]
    server.holds = lambda body: row_of(body) >= 8
    dataset = served_project.dataset(16)
    result = run(served_project, dataset, "stolen", "-n", "2", "--dist", "worksteal", "--geo-concurrency", "4")
    result.assert_outcomes(passed=16)
    assert server.released.is_set()
    assert requests_per_row(served_project) == {i: 3 for i in range(16)}  # nothing ran twice
    ran = json.loads((served_project.pytester.path / "ran.json").read_text())
    slow_rows_ran_on = {ran[f"rows.jsonl::r{i}"] for i in range(8, 16)}
    assert len(slow_rows_ran_on) == 2, ran  # some slow rows were stolen
    served_project.server.reset()
    served_project.server._enter = enter  # type: ignore[method-assign]
    run(served_project, dataset, "single", "-p", "no:xdist").assert_outcomes(passed=16)
    assert results(served_project, "stolen") == results(served_project, "single")


class Gated(MockClient):
    """The mock, but every call waits at a gate the test opens; calls are recorded."""

    def __init__(self) -> None:
        super().__init__()
        self.queries: list[str] = []
        self.seen = threading.Condition()
        self.gate: asyncio.Event | None = None

    async def complete(self, request: ChatRequest) -> ChatResponse:
        with self.seen:
            self.queries.append(request.context["query"])
            self.seen.notify_all()
        if self.gate is None:
            self.gate = asyncio.Event()
        await self.gate.wait()
        return await super().complete(request)

    async def open(self) -> None:
        if self.gate is None:
            self.gate = asyncio.Event()
        self.gate.set()

    def wait_for_calls(self, n: int) -> None:
        with self.seen:
            assert self.seen.wait_for(lambda: len(self.queries) >= n, timeout=10), self.queries


@pytest.fixture
def rows(pytester: pytest.Pytester) -> list[pytest.Item]:
    data = pytester.path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in geo_rows(8)), encoding="utf-8")
    items, _ = pytester.inline_genitems(str(data), "--geo-mock", "-p", "no:cacheprovider")
    return items


@pytest.mark.plugin
def test_unknown_queue_shapes_fall_back_to_nextitem(rows: list[pytest.Item]) -> None:
    def config_with(interactor: Any) -> Any:
        config = SimpleNamespace(pluginmanager=SimpleNamespace(get_plugins=lambda: [object(), interactor]))
        interactor.config = config
        return config

    queue = xdist_remote.TestQueue(execnet.gateway_base.get_execmodel("thread"))
    assert worker_queue_lock(config_with(SimpleNamespace(torun=queue))) == queue.lock
    assert worker_queue_lock(config_with(SimpleNamespace(torun=SimpleNamespace(lock=lambda: nullcontext([]))))) is None
    assert worker_queue_lock(config_with(SimpleNamespace(queue=queue))) is None

    geo = session_over(MockClient(), concurrency=4)
    try:
        WorkerLookahead(geo, rows, None).before(rows[0], rows[1])
        assert [geo.scheduled(item.row) is not None for item in rows] == [True, True] + [False] * 6
    finally:
        geo.close()


@pytest.mark.plugin
def test_a_row_seen_twice_ahead_is_scheduled_and_counted_once(rows: list[pytest.Item]) -> None:
    geo = session_over(MockClient(), concurrency=2)  # 4 rows ahead
    scheduled: list[int] = []
    schedule_many = geo.schedule_many

    def recording(batch: Any) -> Any:
        batch = list(batch)
        scheduled.extend(row.line for row in batch)
        return schedule_many(batch)

    geo.schedule_many = recording  # type: ignore[method-assign]
    queue = xdist_remote.TestQueue(execnet.gateway_base.get_execmodel("thread"))
    for index in (1, 2, 2, 3):  # nextitem queued again, r2 twice: not what xdist does, but harmless
        queue.put(index)
    try:
        WorkerLookahead(geo, rows, queue.lock).before(rows[0], rows[1])
        assert scheduled == [item.row.line for item in rows[:4]]
    finally:
        geo.close()


@pytest.mark.plugin
def test_rows_a_sequential_decision_made_unwanted_are_never_scheduled_ahead(rows: list[pytest.Item]) -> None:
    geo = session_over(MockClient(), concurrency=2)  # 4 rows ahead
    queue = xdist_remote.TestQueue(execnet.gateway_base.get_execmodel("thread"))
    for index in range(1, 8):
        queue.put(index)
    lookahead = WorkerLookahead(geo, rows, queue.lock)
    lookahead.unwanted = lambda item: item in rows[1:3]
    try:
        lookahead.before(rows[0], rows[1])
        assert [geo.scheduled(item.row) is not None for item in rows] == [True, False, False, True, True, True,
                                                                          False, False]
    finally:
        geo.close()
