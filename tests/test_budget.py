"""--geo-budget and --geo-budget-tokens: every call reserves its worst case before it is
sent, so the run never spends more than the budget (the fake server's own count agrees),
under xdist too; rows left are not run and pytest-geo::budget fails; cached answers cost
nothing; a dollar budget over a model without a price is a usage error before any call."""

from __future__ import annotations

import argparse
import asyncio
import html
import json
import multiprocessing
import os
import random
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from fake_openai import FakeOpenAI

from conftest import GPT_4O_MINI_PRICES, ONE_PROCESS_AND_TWO_WORKERS, PROMPTS, GeoProject, egeo_workdir, prices_ini
from pytest_geo.cli import main
from pytest_geo.llm.base import ChatRequest, ChatResponse
from pytest_geo.llm.budget import BudgetClient, BudgetReached, output_cap, prompt_token_bound, with_output_cap
from pytest_geo.llm.healing import HealingClient
from pytest_geo.llm.ledger import BudgetLimits, Cost, Ledger
from pytest_geo.llm.prices import format_dollars
from pytest_geo.llm.profiles import ShapedRequest
from pytest_geo.options import dollars
from pytest_geo.price import Price

# gpt-4o-mini, every role's default: $0.15 / $0.60 per million tokens (OpenAI's list prices,
# declared with geo_prices: GeoProject.priced). A call's worst case
# is about $0.0026 (its prompt and the 4,096-token output cap), a fake-server row costs
# about $0.00015: $0.004 runs several rows, then the next call cannot fit.
BUDGET = 0.004
# The cap these tests reserve: answers are otherwise capped at their size (issue 37), and a
# call's worst case is then too small for these budgets to stop a run.
FULL_CAP = ("--geo-max-output-tokens", "4096")


def report(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def server_dollars(server: FakeOpenAI) -> float:
    return (server.billed["prompt_tokens"] * 0.15 + server.billed["completion_tokens"] * 0.60) / 1e6


def assert_within(budget: dict[str, Any], server: FakeOpenAI, limit: float | None, tokens: int | None) -> None:
    """What the run charged stays within the budget, and the server billed what the run
    counted (plus at most the worst cases of calls cut off before their answer)."""
    billed = sum(server.billed.values())
    assert budget["spent_tokens"] <= billed <= budget["spent_tokens"] + budget["unknown_tokens"]
    assert budget["spent_tokens"] > 0
    if limit is not None:
        assert budget["spent_usd"] + budget["unknown_usd"] <= limit
        assert server_dollars(server) <= limit
    if tokens is not None:
        assert budget["spent_tokens"] + budget["unknown_tokens"] <= tokens and billed <= tokens


def junit_failures(path: Path) -> dict[str, str]:
    root = ET.parse(path).getroot()
    return {f"{case.get('classname')}::{case.get('name')}": failure.get("message", "")
            for case in root.iter("testcase") for failure in case.iter("failure")}


@pytest.mark.parametrize("workers", ONE_PROCESS_AND_TWO_WORKERS)
def test_a_budget_run_stops_within_the_budget(served_project: GeoProject, workers: str) -> None:
    pytest.importorskip("xdist")
    rows = 16
    served_project.priced()
    result = served_project.pytester.runpytest(
        str(served_project.dataset(rows)), "--geo-base-url", served_project.server.url, "-n", workers,
        "-p", "no:cacheprovider", "-rs", "--geo-concurrency", "2", "--geo-budget", str(BUDGET),
        "--geo-report", "r.json", "--junitxml", "j.xml", "--geo-html", "h.html", *FULL_CAP)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    outcomes = result.parseoutcomes()
    assert outcomes["failed"] == 1 and outcomes["passed"] >= 1 and outcomes["skipped"] >= 1
    assert outcomes["passed"] + outcomes["skipped"] == rows
    data = report(served_project.pytester.path / "r.json")
    assert_within(data["budget"], served_project.server, BUDGET, None)
    assert data["budget"]["spent_usd"] == pytest.approx(data["cost"]["total"])  # the ledger and usage agree
    assert data["budget"]["budget_usd"] == BUDGET and data["budget"]["refused_calls"] >= 1
    assert data["complete"] is False and data["not_run"] == outcomes["skipped"]
    assert len(data["rows"]) == outcomes["passed"]  # rows not run are never scored rows
    reached = data["budget"]["reached"]
    assert re.fullmatch(r"budget reached: a (ranker|rewriter) call to gpt-4o-mini may cost up to \$0\.00\d+ "
                        r"\(its prompt and the 4,096-token output cap\), and \$0\.00\d+ of \$0\.004000 is left"
                        r"; the prompt fits, its output cap does not: lower it with --geo-max-output-tokens N",
                        reached), reached
    gate = f"{reached}; {outcomes['skipped']} row(s) not run"
    assert data["gates"] == [{"nodeid": "pytest-geo::budget", "message": gate, "gate": "budget", "score": None,
                              "limit": ""}]
    assert junit_failures(served_project.pytester.path / "j.xml") == {"pytest-geo::budget": gate}
    lines = result.stdout.lines
    assert f"1 failed, {outcomes['passed']} passed, {outcomes['skipped']} skipped" in lines[-1]
    assert lines[lines.index(next(line for line in lines if "_ pytest-geo::budget _" in line)) + 1] == gate
    page = (served_project.pytester.path / "h.html").read_text(encoding="utf-8")
    assert (f'<p class="banner partial" role="alert">Partial run: {outcomes["skipped"]} selected rows did not run; '
            f"the scores cover only the rows that ran. The budget was reached: {html.escape(reached)}.</p>") in page
    result.stdout.fnmatch_lines([
        f"SKIPPED [[]{outcomes['skipped']}[]] *: not run: {reached}",
        f"budget: $0.00* spent of $0.004000*; {reached}",  # (and what calls cut off in flight were charged)
        f"partial run: {outcomes['skipped']} of {rows} selected rows did not run (the budget was reached); "
        "the scores cover only the rows that ran",
    ])


@pytest.mark.plugin
def test_a_token_budget_holds_for_a_model_without_a_price(served_project: GeoProject) -> None:
    tokens = 12000
    result = served_project.run(
        str(served_project.dataset(16)), "--geo-ranker-model", "llama-local", "--geo-rewriter-model", "llama-local",
        "--geo-concurrency", "2", "--geo-budget-tokens", str(tokens), "--geo-report", "r.json")
    outcomes = result.parseoutcomes()
    assert outcomes["failed"] == 1 and outcomes["passed"] >= 1 and outcomes["skipped"] >= 1
    budget = report(served_project.pytester.path / "r.json")["budget"]
    assert_within(budget, served_project.server, None, tokens)
    assert budget["budget_usd"] is None and budget["budget_tokens"] == tokens
    result.stdout.fnmatch_lines([
        f"budget: {budget['spent_tokens']:,} tokens spent of 12,000; budget reached: a * call to llama-local may "
        "cost up to * tokens (its prompt and the 4,096-token output cap), and * of 12,000 tokens is left*"])


@pytest.mark.plugin
def test_both_bounds_hold_together(served_project: GeoProject) -> None:
    result = served_project.priced().run(str(served_project.dataset(16)), "--geo-concurrency", "2",
                                "--geo-budget", "1", "--geo-budget-tokens", "12000", "--geo-report", "r.json",
                                *FULL_CAP)
    assert result.parseoutcomes()["skipped"] >= 1
    budget = report(served_project.pytester.path / "r.json")["budget"]
    assert_within(budget, served_project.server, 1.0, 12000)
    assert " tokens is left" in budget["reached"]  # the dollars were far from reached: the tokens stopped it
    assert {r["body"].get("max_tokens") for r in served_project.server.requests} == {4096}  # the cap reserved
    result.stdout.fnmatch_lines([f"budget: $0.00* spent of $1.000, {budget['spent_tokens']:,} tokens spent of 12,000; *"])


@pytest.mark.plugin
@pytest.mark.parametrize("given", [["--geo-budget", "1"], ["ini"]])
def test_a_dollar_budget_over_a_model_without_a_price_is_a_usage_error(
        served_project: GeoProject, given: list[str]) -> None:
    served_project.priced()  # the ranker's gpt-4o-mini
    if given == ["ini"]:
        served_project.pytester.makeini(prices_ini() + "geo_budget = 1\n")
        given = []
    result = served_project.run(str(served_project.dataset(2)), "--geo-rewriter-model", "llama-local", *given)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([
        "ERROR: --geo-budget: no price for the rewriter model llama-local, so its calls cannot be held to a budget "
        "in dollars: add it to the ini option geo_prices, or bound tokens with --geo-budget-tokens N"])
    assert served_project.server.requests == []


@pytest.mark.plugin
def test_a_price_from_geo_prices_or_a_token_bound_lets_it_run(served_project: GeoProject) -> None:
    served_project.priced(GPT_4O_MINI_PRICES, "house-model = 1, 3")
    dataset = str(served_project.dataset(2))
    served_project.run(dataset, "--geo-rewriter-model", "house-model", "--geo-budget", "1").assert_outcomes(passed=2)
    served_project.run(dataset, "--geo-rewriter-model", "llama-local", "--geo-budget", "1",
                       "--geo-budget-tokens", "100000", "--geo-no-cache").assert_outcomes(passed=2)


@pytest.mark.plugin
@pytest.mark.parametrize(("flag", "value", "message"), [
    ("--geo-budget", "0", "'0' must be more than 0"),
    ("--geo-budget", "nan", "'nan' is not a finite number"),
    ("--geo-budget-tokens", "-5", "'-5' must be at least 1"),
])
def test_a_budget_that_is_no_amount_is_refused(served_project: GeoProject, flag: str, value: str,
                                               message: str) -> None:
    result = served_project.run(str(served_project.dataset(1)), flag, value)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*argument {flag}: {message}"])


@pytest.mark.unit
def test_dollars_accepts_a_dollar_sign() -> None:
    assert dollars("$0.50") == 0.5
    with pytest.raises(argparse.ArgumentTypeError, match="'inf' is not a finite number"):
        dollars("inf")


@pytest.mark.plugin
def test_cached_answers_need_no_budget(served_project: GeoProject) -> None:
    served_project.priced()
    dataset = str(served_project.dataset(4))
    served_project.run(dataset, *FULL_CAP).assert_outcomes(passed=4)  # fills the answer cache
    sent = len(served_project.server.requests)
    # $0.001 cannot cover one call's worst case ($0.0026): only cached answers can run.
    cached = served_project.run(dataset, "--geo-budget", "0.001", *FULL_CAP)
    cached.assert_outcomes(passed=4)
    assert len(served_project.server.requests) == sent
    cached.stdout.fnmatch_lines(["budget: $0.00 spent of $0.001000"])
    uncached = served_project.run(dataset, "--geo-budget", "0.001", "--geo-no-cache", *FULL_CAP)
    uncached.assert_outcomes(passed=0, skipped=4, failed=1)
    assert len(served_project.server.requests) == sent  # a call that would cross the budget is not sent


PROCEDURE_SUITE = '''
import pytest_geo

headline = pytest_geo.prompt("headline", "Write a headline for: {{input}}")
headline_eval = pytest_geo.suite("headline", data={"items": [("red kettle", "red kettle"), ("blue mug", "blue mug")]})

@headline_eval.metric
def same(items, expected):
    return headline(items) == expected
'''


@pytest.mark.plugin
def test_suite_rows_whose_prompt_call_was_not_sent_are_not_run(served_project: GeoProject) -> None:
    served_project.priced().pytester.makepyfile(test_headline=PROCEDURE_SUITE)
    result = served_project.run("test_headline.py", "-rs", "--geo-budget", "0.001", "--geo-report", "r.json")
    result.assert_outcomes(skipped=2, failed=1)
    assert served_project.server.requests == []
    data = report(served_project.pytester.path / "r.json")
    assert data["rows"] == [] and data["not_run"] == 2
    assert [g["nodeid"] for g in data["gates"]] == ["pytest-geo::budget"]
    result.stdout.fnmatch_lines(["SKIPPED [[]2[]] *: not run: budget reached: a procedure call to gpt-4o-mini *"])


OVERBILLING = '''
import dataclasses, json
from pytest_geo.llm.mock import MockClient

CAPS = []

class Overbilling(MockClient):
    """Bills more answer tokens than the output cap it was sent (a server ignoring it)."""
    async def complete(self, request):
        CAPS.append(request.max_output_tokens)
        response = await super().complete(request)
        return dataclasses.replace(response, completion_tokens=10_000)

def pytest_geo_make_client(config, settings):
    return Overbilling()

def pytest_sessionfinish(session):
    (session.config.rootpath / "caps.json").write_text(json.dumps(CAPS))
'''


@pytest.mark.plugin
def test_an_answer_billed_past_its_worst_case_stops_the_budget(served_project: GeoProject) -> None:
    served_project.priced().pytester.makeconftest(OVERBILLING)
    result = served_project.run(str(served_project.dataset(4)), "--geo-budget", "1", "--geo-concurrency", "1",
                                "--geo-report", "r.json", *FULL_CAP)
    result.assert_outcomes(skipped=4, failed=1)
    caps = json.loads((served_project.pytester.path / "caps.json").read_text())
    assert caps and set(caps) == {4096}
    reached = report(served_project.pytester.path / "r.json")["budget"]["reached"]
    assert reached.startswith("budget stopped: a ")
    assert "call to gpt-4o-mini was billed $0.006" in reached and "tokens), more than its reserved worst case $0.002" \
        in reached and reached.endswith("(did the server ignore the output-token cap?)")


@pytest.mark.e2e
def test_egeo_budget(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_openai: FakeOpenAI,
                     capsys: pytest.CaptureFixture[str]) -> None:
    egeo_workdir(tmp_path, monkeypatch, rows=16)
    (tmp_path / "pytest.ini").write_text(prices_ini(), encoding="utf-8")  # egeo reads the project's geo_prices
    code = main(["evaluate", "--dataset", "rows.jsonl", "--prompts", str(PROMPTS), "--base-url", fake_openai.url,
                 "--concurrency", "2", "--budget", str(BUDGET), "--report", "r.json", "--max-output-tokens", "4096"])
    assert code == 1
    out, err = capsys.readouterr()
    data = report(tmp_path / "r.json")
    assert_within(data["budget"], fake_openai, BUDGET, None)
    ran = json.loads(out)["n"]
    assert 1 <= ran < 16 and len(data["rows"]) == ran and data["not_run"] == 16 - ran
    reached = data["budget"]["reached"]
    assert f"budget: {fmt(data['budget']['spent_usd'])} spent of $0.004000; {reached}" in err.splitlines()
    assert (f"egeo: partial run: {16 - ran} of 16 rows did not run ({reached}); the metrics cover only the rows "
            "that ran") in err.splitlines()


def fmt(value: float) -> str:
    return format_dollars(round(value * 1e9))


@pytest.mark.e2e
def test_egeo_refuses_a_dollar_budget_without_a_price(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      fake_openai: FakeOpenAI,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    egeo_workdir(tmp_path, monkeypatch, rows=2)
    code = main(["evaluate", "--dataset", "rows.jsonl", "--prompts", str(PROMPTS), "--base-url", fake_openai.url,
                 "--ranker-model", "llama-local", "--budget", "1"])
    assert code == 2
    assert capsys.readouterr().err == (
        "egeo: error: --budget: no price for the ranker model llama-local, so its calls cannot be held to a budget "
        "in dollars: add it to the ini option geo_prices in the project's pytest configuration, or bound tokens "
        "with --budget-tokens N\n")
    assert fake_openai.requests == []


@pytest.mark.e2e
def test_egeo_reads_geo_prices_from_the_projects_pytest_configuration(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_openai: FakeOpenAI,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The project's geo_prices prices egeo's models as the plugin's: a budget runs, the cost is shown."""
    egeo_workdir(tmp_path, monkeypatch, rows=2)
    (tmp_path / "pytest.ini").write_text("[pytest]\ngeo_prices =\n    llama-local = 1.00, 2.00\n",
                                         encoding="utf-8")
    code = main(["evaluate", "--dataset", "rows.jsonl", "--prompts", str(PROMPTS), "--base-url", fake_openai.url,
                 "--ranker-model", "llama-local", "--rewriter-model", "llama-local", "--budget", "1"])
    assert code == 0
    assert len(fake_openai.requests) == 6
    err = capsys.readouterr().err
    assert "cost: $" in err and "no price" not in err
    (tmp_path / "pytest.ini").write_text("[pytest]\ngeo_prices =\n    llama-local = cheap\n", encoding="utf-8")
    assert main(["evaluate", "--dataset", "rows.jsonl", "--prompts", str(PROMPTS), "--base-url", fake_openai.url,
                 "--ranker-model", "llama-local"]) == 2
    assert "pytest.ini: ini option geo_prices: " in capsys.readouterr().err
    assert len(fake_openai.requests) == 6


@pytest.mark.unit
def test_the_prompt_bound_counts_bytes_and_the_chat_format() -> None:
    plain = ChatRequest("ranker", "m", ({"role": "user", "content": "héllo"},))
    assert prompt_token_bound(plain) == 8 + 8 + len("user") + len("héllo".encode())  # 26
    schema = {"title": "ranking", "type": "object"}
    with_schema = ChatRequest("ranker", "m", ({"role": "user", "content": "héllo"},), response_schema=schema)
    sent_format = ('{"type": "json_schema", "json_schema": {"name": "ranking", "schema": {"title": "ranking", '
                   '"type": "object"}, "strict": true}}')  # the strict response format the body holds
    assert prompt_token_bound(with_schema) == 26 + 64 + len(sent_format)


@pytest.mark.unit
@pytest.mark.parametrize(("model", "param"), [("gpt-4o-mini", "max_tokens"), ("o3", "max_completion_tokens")])
def test_a_request_sent_without_an_output_cap_gets_the_one_reserved(model: str, param: str) -> None:
    shaped = HealingClient(Answering()).shape(ChatRequest("ranker", model, ({"role": "user", "content": "x"},)))
    assert output_cap(shaped) is None
    capped = with_output_cap(shaped, 4096)
    assert isinstance(capped, ShapedRequest) and capped.body[param] == 4096 and output_cap(capped) == 4096
    assert {k: v for k, v in capped.body.items() if k != param} == shaped.body


def _spend(path: str, seed: int, results: Any) -> None:
    """One process of a shared budget: reserve, then settle at a random share of the
    worst case, until the ledger refuses."""
    ledger = Ledger(BudgetLimits(nanousd=5_000_000), Path(path))
    rng = random.Random(seed)
    spent = Cost()
    while True:
        worst = Cost(rng.randint(1_000, 50_000), 10)
        verdict = ledger.reserve(worst, lambda left: "reached")
        if verdict == "reached":
            break
        if verdict is None:
            actual = Cost(rng.randint(0, worst.nanousd), rng.randint(0, 10))
            ledger.settle(worst, actual)
            spent += actual
    results.put((spent.nanousd, spent.tokens))


@pytest.mark.e2e
def test_processes_sharing_a_ledger_never_cross_it_and_lose_no_update(tmp_path: Path) -> None:
    path = Ledger.create(tmp_path)
    context = multiprocessing.get_context("fork")
    results: Any = context.Queue()
    workers = [context.Process(target=_spend, args=(str(path), seed, results))
               for seed in range(4)]
    for worker in workers:
        worker.start()
    spent = [results.get(timeout=120) for _ in workers]
    for worker in workers:
        worker.join()
    status = Ledger(BudgetLimits(nanousd=5_000_000), path).status()
    assert status.spent == Cost(sum(n for n, _ in spent), sum(t for _, t in spent))  # every update kept
    assert status.spent.nanousd <= 5_000_000 and status.unknown == Cost()
    assert status.spent.nanousd > 5_000_000 - 50_000  # stopped only when the next worst case could not fit
    assert status.reached == "reached" and status.refused_calls == 4


@pytest.mark.e2e
def test_a_reservation_held_by_a_dead_process_is_charged(tmp_path: Path) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    path = Ledger.create(tmp_path)
    limits = BudgetLimits(tokens=100)
    gone = Ledger(limits, path)
    gone.owner = dead.stdout.strip()
    assert gone.reserve(Cost(0, 60), lambda left: "reached") is None
    mine = Ledger(limits, path)
    assert mine.owner == str(os.getpid())
    assert mine.reserve(Cost(0, 30), lambda left: "reached") is None  # 60 + 30 fit
    # 60 + 30 + 30 do not fit: wait, and the dead process's 60 become charged in full.
    assert mine.reserve(Cost(0, 30), lambda left: "reached") == ""
    assert mine.status().unknown == Cost(0, 60 + 30)  # its 60, and my 30 still held
    # 60 + 50 do not fit even with every reservation released: refused, for good.
    assert mine.reserve(Cost(0, 50), lambda left: f"{left.tokens} left") == "40 left"
    assert mine.reserve(Cost(0, 1), lambda left: "again") == "40 left"


class Answering:
    """A backend that answers after a moment with fixed usage, counting calls in flight."""

    def __init__(self, latency: float = 0.01) -> None:
        self.latency = latency
        self.in_flight = 0
        self.most = 0

    async def complete(self, request: ChatRequest) -> ChatResponse:
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        await asyncio.sleep(self.latency)
        self.in_flight -= 1
        return ChatResponse(text="ok", prompt_tokens=10, completion_tokens=5)

    async def aclose(self) -> None:
        pass


@pytest.mark.unit
def test_a_call_that_fits_once_others_settle_waits_for_them() -> None:
    backend = Answering()
    request = ChatRequest("ranker", "m", ({"role": "user", "content": "x" * 80},), max_output_tokens=100)
    worst = prompt_token_bound(request) + 100  # 208 tokens
    client = BudgetClient(backend, Ledger(BudgetLimits(tokens=worst + 50)), {})

    async def run() -> list[ChatResponse | BaseException]:
        return await asyncio.gather(*(client.complete(request) for _ in range(3)), return_exceptions=True)

    answers = asyncio.run(run())
    assert [a.text if isinstance(a, ChatResponse) else a for a in answers] == ["ok", "ok", "ok"]
    assert backend.most == 1  # one worst case fits at a time: each waited for the one before
    status = client.ledger.status()
    assert (status.spent, status.reached) == (Cost(0, 45), None)


@pytest.mark.unit
def test_a_model_without_a_price_under_a_dollar_budget_is_never_called() -> None:
    backend = Answering()
    client = BudgetClient(backend, Ledger(BudgetLimits(nanousd=10**9)), {"priced": Price(1, 1)})
    request = ChatRequest("ranker", "unpriced", ({"role": "user", "content": "x"},))
    with pytest.raises(BudgetReached, match="^budget stopped: no price for model unpriced$"):
        asyncio.run(client.complete(request))
    assert backend.most == 0
    assert client.ledger.status().reached == "budget stopped: no price for model unpriced"


ELSEWHERE = '''
import pytest

@pytest.hookimpl(trylast=True)
def pytest_configure_node(node):
    node.workerinput["geo_budget_ledger"] = "/nonexistent/pytest-geo-budget.json"  # a remote worker's view
'''


@pytest.mark.xdist
def test_a_worker_that_cannot_see_the_ledger_refuses_to_start(served_project: GeoProject) -> None:
    pytest.importorskip("xdist")
    served_project.priced().pytester.makeconftest(ELSEWHERE)
    # One refusal shows it: xdist would otherwise start four replacements, each refused alike.
    result = served_project.pytester.runpytest(str(served_project.dataset(2)), "--geo-base-url",
                                               served_project.server.url, "-n", "1", "--max-worker-restart", "0",
                                               "--geo-budget", "1")
    assert result.ret != pytest.ExitCode.OK
    assert ("--geo-budget: this xdist worker cannot find its controller's budget ledger "
            "(/nonexistent/pytest-geo-budget.json): the workers must share the controller's file system (local -n N)"
            ) in result.stdout.str() + result.stderr.str()
    assert served_project.server.requests == []


@pytest.mark.plugin
def test_a_call_cut_off_before_its_answer_stays_charged_at_its_worst_case(served_project: GeoProject) -> None:
    """The server may bill an answer the client stopped waiting for: the budget keeps it."""
    server = served_project.server
    server.slow_seconds = 1.5
    server.fail_next("slow")
    result = served_project.priced().run(str(served_project.dataset(2)), "--geo-timeout", "0.5", "--geo-max-retries", "0",
                                "--geo-concurrency", "1", "--geo-budget", "1", "--geo-report", "r.json", *FULL_CAP)
    result.assert_outcomes(passed=1, failed=1)
    budget = report(served_project.pytester.path / "r.json")["budget"]
    assert budget["unknown_tokens"] > 4096 and budget["unknown_usd"] > 0.0024  # the cap alone: 4,096 x $0.60/M
    deadline = time.monotonic() + 10
    while server.in_flight and time.monotonic() < deadline:  # the slow answer is still being written
        time.sleep(0.05)
    assert_within(budget, server, 1.0, None)
    assert sum(server.billed.values()) > budget["spent_tokens"]  # the server did answer (and bill) it


class Recording(Answering):
    def __init__(self) -> None:
        super().__init__(latency=0.05)  # every other call has begun to wait before the first answers
        self.order: list[str] = []

    async def complete(self, request: ChatRequest) -> ChatResponse:
        self.order.append(request.role)
        return await super().complete(request)


@pytest.mark.unit
def test_the_newest_waiting_call_goes_first() -> None:
    """A row's last call starts waiting after its first ones: served first, rows under way
    finish before rows barely started spend anything."""
    backend = Recording()
    limit = prompt_token_bound(ChatRequest("a", "m", ({"role": "user", "content": "x"},))) + 100
    client = BudgetClient(backend, Ledger(BudgetLimits(tokens=limit + 80)), {})  # one worst case at a time

    async def call(role: str, after: float) -> None:
        await asyncio.sleep(after)
        await client.complete(ChatRequest(role, "m", ({"role": "user", "content": "x"},), max_output_tokens=100))

    async def run() -> None:
        await asyncio.gather(call("first", 0), call("older", 0.002), call("newer", 0.004), call("newest", 0.006))

    asyncio.run(run())
    assert backend.order == ["first", "newest", "newer", "older"]


SHARED: list[Ledger] = []  # a ledger opened before the fork, inherited by the children


def _spend_inherited(seed: int, results: Any) -> None:
    ledger = SHARED[0]
    rng = random.Random(seed)
    spent = Cost()
    for _ in range(200):
        worst = Cost(rng.randint(1_000, 5_000), 1)
        if ledger.reserve(worst, lambda left: "reached") is None:
            actual = Cost(rng.randint(0, worst.nanousd), 1)
            ledger.settle(worst, actual)
            spent += actual
    results.put(spent.nanousd)


@pytest.mark.e2e
def test_a_ledger_open_before_a_fork_still_excludes_the_children(tmp_path: Path) -> None:
    path = Ledger.create(tmp_path)
    SHARED[:] = [Ledger(BudgetLimits(nanousd=10**12), path)]
    SHARED[0].status()  # opened here: a child that locked the inherited file would not exclude its siblings
    context = multiprocessing.get_context("fork")
    results: Any = context.Queue()
    workers = [context.Process(target=_spend_inherited, args=(seed, results)) for seed in range(4)]
    for worker in workers:
        worker.start()
    spent = sum(results.get(timeout=120) for _ in workers)
    for worker in workers:
        worker.join()
    assert Ledger(BudgetLimits(nanousd=10**12), path).status().spent == Cost(spent, 800)  # no update lost


@pytest.mark.unit
def test_the_ledger_is_rewritten_in_place_and_only_when_it_changed(tmp_path: Path) -> None:
    path = Ledger.create(tmp_path)
    ledger = Ledger(BudgetLimits(tokens=1000), path)
    ledger.settle(Cost(0, 0), Cost(0, 10))  # this process's settled calls are on file
    assert ledger.reserve(Cost(0, 600), lambda left: "reached") is None
    held = path.read_bytes()
    ledger.status()
    assert path.read_bytes() == held  # a read writes nothing
    ledger.settle(Cost(0, 600), Cost(0, 15))
    settled = path.read_bytes()
    assert len(settled) == len(held) and settled.endswith(b" ")  # shorter text, padded where it was
    assert json.loads(settled)["spent"] == [0, 25] and json.loads(settled)["reserved"] == {}
    assert Ledger(BudgetLimits(tokens=1000), path).status().spent == Cost(0, 25)
