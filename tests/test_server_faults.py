"""Servers that lie (issue 38): answers that break encoders, pages that are not the
protocol, usage that is not honest, headers that are not numbers, bodies that never end.
Each runs the real `openai` SDK over real HTTP against tests/fake_openai.py on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
from fake_openai import MISSING, FakeOpenAI

from conftest import PROMPTS, GeoProject, egeo_workdir
from pytest_geo.cli import main
from pytest_geo.llm import bounded_body
from pytest_geo.llm.base import ChatRequest, ModelError
from pytest_geo.llm.batch import BatchClient, PollPolicy
from pytest_geo.llm.openai_client import OpenAIChatClient

pytestmark = pytest.mark.e2e

KEY = "sk-test-dummy-0000"
RANKER = ChatRequest(
    "ranker", "m", ({"role": "system", "content": 'Answer {"ordered_ids": [...]}'},
                    {"role": "user", "content": 'Query: kettle\n[{"id": "a", "title": "kettle", "description": "x"}]'}),
)


def ask(server: FakeOpenAI, timeout: float = 5.0, max_retries: int = 0) -> object:
    async def go() -> object:
        client = OpenAIChatClient(KEY, server.url, timeout=timeout, max_retries=max_retries)
        try:
            return await client.complete(RANKER)
        finally:
            await client.aclose()

    return asyncio.run(go())


def fail_row(server: FakeOpenAI, row: str, fault: str) -> None:
    """Every call of the row whose query names `row` gets `fault`; the others are answered."""
    server.fault_for = lambda body: fault if f"red kettle number {row}\n" in json.dumps(body["messages"]) \
        .encode().decode("unicode_escape") else None


# A lone surrogate -------------------------------------------------------------------------

def test_a_lone_surrogate_is_one_rows_error_and_every_report_is_written(served_project: GeoProject) -> None:
    server = served_project.server
    server.fault_for = lambda body: "surrogate" if "number 1" in json.dumps(body) else None
    result = served_project.run(str(served_project.dataset(4)), "--geo-concurrency", "1", "--geo-report", "r.json",
                                "--geo-html", "r.html", "--junitxml", "j.xml", "--geo-no-cache")
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines(["*holds a lone surrogate (an escape such as \\ud800 with no pair)*"])
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    path = served_project.pytester.path
    report = json.loads((path / "r.json").read_text(encoding="utf-8"))
    assert sorted(r["query_id"] for r in report["rows"] if r.get("error") is None) == ["r0", "r2", "r3"]
    assert (path / "r.html").stat().st_size > 0 and (path / "j.xml").stat().st_size > 0
    transcripts = [p for p in path.iterdir() if "transcript" in p.name]
    assert transcripts and all(p.stat().st_size > 0 for p in transcripts)


def test_egeo_scores_the_other_rows_when_one_answer_holds_a_lone_surrogate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_openai: FakeOpenAI, capsys: pytest.CaptureFixture[str]
) -> None:
    egeo_workdir(tmp_path, monkeypatch, rows=3)
    fake_openai.fault_for = lambda body: "surrogate" if "number 0" in json.dumps(body) else None
    code = main(["evaluate", "--dataset", "rows.jsonl", "--prompts", str(PROMPTS), "--base-url", fake_openai.url,
                 "--no-cache", "--report", "r.json"])
    out = capsys.readouterr()
    assert code == 1
    assert "r0: error:" in out.out + out.err and "lone surrogate" in out.out + out.err
    report = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    assert sorted(r["query_id"] for r in report["rows"] if r.get("error") is None) == ["r1", "r2"]


def test_a_lone_surrogate_in_the_protocols_text_is_that_calls_error(fake_openai: FakeOpenAI) -> None:
    fake_openai.fail_next("raw_surrogate")
    with pytest.raises(ModelError) as info:
        ask(fake_openai)
    assert str(info.value) == ("ranker model call failed: the answer is not valid text (it holds a lone surrogate, "
                               "such as \\ud800)")
    assert not info.value.transport  # one row's error: the server itself is fine


# Answers that are not the protocol --------------------------------------------------------

def test_a_gateway_page_as_every_answer_stops_the_run_naming_the_role(served_project: GeoProject) -> None:
    served_project.server.always = "html"
    result = served_project.run(str(served_project.dataset(30)), "--geo-concurrency", "1", "--geo-no-cache",
                                "--geo-report", "r.json")
    assert len(served_project.server.requests) <= 20  # 8 consecutive failed calls trip the breaker (60 without)
    # A row's rewrite is asked beside its first ranking, so the eighth failure is either role's.
    result.stdout.re_match_lines([
        r".*stopped calling 127\.0\.0\.1 \(model .*\) after 8 consecutive failed calls; last: (ranker|rewriter) "
        r"model call failed: the server's answer is not a chat completion: '<html><head><title>502 Bad Gateway.*"])
    report = json.loads((served_project.pytester.path / "r.json").read_text(encoding="utf-8"))
    errors = sum(role["errors"] for role in report["usage"].values())
    calls = sum(role["calls"] for role in report["usage"].values())
    # the rest: cancelled with their row (a call cancelled as it was sent may count, unseen by the server)
    assert 8 <= errors <= calls and errors <= len(served_project.server.requests)
    assert report["complete"] is False


def test_unusable_answers_are_never_cached_so_a_rerun_asks_again(served_project: GeoProject) -> None:
    server = served_project.server
    dataset = str(served_project.dataset(3))
    faults = {"number 0": "overloaded", "number 1": "html"}  # a refusal in prose; a gateway's page
    server.fault_for = lambda body: next((f for row, f in faults.items() if row in json.dumps(body)), None)
    served_project.run(dataset, "--geo-cache-dir", "c").assert_outcomes(passed=1, failed=2)
    server.reset()  # the server is well again: r0 and r1 are asked live, r2 comes from the cache
    served_project.run(dataset, "--geo-cache-dir", "c").assert_outcomes(passed=3)
    asked = {row for r in server.requests for row in ("number 0", "number 1", "number 2") if row in json.dumps(r["body"])}
    assert asked == {"number 0", "number 1"}


# Usage the server does not report honestly ------------------------------------------------

@pytest.mark.parametrize("usage", [MISSING, None, "12 tokens", {"prompt_tokens": 12.5, "completion_tokens": 3},
                                   {"prompt_tokens": -40, "completion_tokens": 3},
                                   {"prompt_tokens": 10**15, "completion_tokens": 10**15}],
                         ids=["missing", "null", "string", "float", "negative", "absurd"])
def test_an_answer_without_honest_usage_has_an_unknown_cost_never_zero(served_project: GeoProject,
                                                                       usage: object) -> None:
    served_project.server.usage_as = usage
    result = served_project.priced().run(str(served_project.dataset(2)), "--geo-no-cache", "--geo-report", "r.json")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["cost: unknown, the server reported no usable token counts for 6 calls of "
                                 "ranker, rewriter; tokens above"])
    assert "cost: $0.00" not in result.stdout.str()
    report = json.loads((served_project.pytester.path / "r.json").read_text(encoding="utf-8"))
    assert report["cost"]["total"] is None and report["cost"]["roles"]["ranker"]["cost"] is None
    assert report["cost"]["unreported_usage_roles"] == ["ranker", "rewriter"]
    assert report["usage"]["ranker"]["unreported_usage"] == 4 and report["usage"]["ranker"]["prompt_tokens"] == 0


def test_a_budget_charges_an_answer_without_usage_its_reservation(served_project: GeoProject) -> None:
    """Honest usage spends about $0.00015 a row here; each call's worst case (its prompt and
    4,096 output tokens at gpt-4o-mini's price) is about $0.0026, so $0.005 holds one call
    charged at its reservation, and the second call's worst case no longer fits."""
    server = served_project.server
    server.usage_as = MISSING
    result = served_project.priced().run(str(served_project.dataset(30)), "--geo-no-cache", "--geo-budget", "0.005",
                                "--geo-concurrency", "1")
    assert len(server.requests) < 30  # each charged its reservation; without the charge: all 90 at "$0.00"
    result.stdout.fnmatch_lines(["budget: $0.00 spent of $0.005000 (and up to $0.00*, * tokens charged for calls "
                                 "whose cost is unknown*budget reached: a * call*"])


# Rate-limit headers that are not numbers --------------------------------------------------

@pytest.mark.parametrize("value", ["nan", "1e-320", "inf", "-5"])
def test_rate_limit_headers_that_are_not_usable_numbers_are_ignored(served_project: GeoProject, value: str) -> None:
    server = served_project.server
    server.extra_headers = {"x-ratelimit-limit-requests": "100", "x-ratelimit-remaining-requests": "0",
                            "x-ratelimit-reset-requests": value, "retry-after-ms": value}
    server.fail_next("429")  # a 429 whose wait is read from them
    dataset = str(served_project.dataset(2))
    served_project.run(dataset, "--geo-no-cache", "--geo-concurrency", "auto").assert_outcomes(passed=2)
    server.extra_headers["x-ratelimit-remaining-requests"] = "50"  # successes whose refill rate is read
    served_project.run(dataset, "--geo-no-cache", "--geo-concurrency", "auto").assert_outcomes(passed=2)


# Settings no call could use: refused at start ---------------------------------------------

@pytest.mark.parametrize("value", ["nan", "inf"])
def test_a_timeout_that_is_not_a_finite_number_is_refused_at_start(served_project: GeoProject, value: str) -> None:
    result = served_project.run(str(served_project.dataset(1)), f"--geo-timeout={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*--geo-timeout: '{value}' is not a finite number*"])
    assert served_project.server.requests == []


def test_egeo_refuses_a_timeout_that_is_not_finite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   fake_openai: FakeOpenAI, capsys: pytest.CaptureFixture[str]) -> None:
    egeo_workdir(tmp_path, monkeypatch, rows=1)
    with pytest.raises(SystemExit) as info:
        main(["evaluate", "--dataset", "rows.jsonl", "--prompts", str(PROMPTS), "--base-url", fake_openai.url,
              "--timeout", "nan"])
    assert info.value.code == 2
    assert "--timeout: 'nan' is not a finite number" in capsys.readouterr().err
    assert fake_openai.requests == []


def test_a_price_no_cost_could_be_computed_with_is_refused_at_start(served_project: GeoProject) -> None:
    served_project.pytester.makeini("[pytest]\ngeo_prices =\n    gpt-4o-mini = 1e308, 1e308\n")
    result = served_project.run(str(served_project.dataset(1)))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*geo_prices: line 1 'gpt-4o-mini = 1e308, 1e308': prices must be finite, not "
                                 "negative and at most 100000 dollars per million tokens*"])
    assert served_project.server.requests == []


# The budget and healing -------------------------------------------------------------------

def test_a_budget_keeps_the_output_cap_off_a_server_that_refuses_it(served_project: GeoProject) -> None:
    server = served_project.server
    server.refuse_params = {"max_tokens"}
    result = served_project.priced().run(str(served_project.dataset(3)), "--geo-no-cache", "--geo-budget", "1")
    result.assert_outcomes(passed=3)
    # Refused for the calls sent before the first refusal came back (a row's two), then never sent again.
    assert 1 <= len(server.refused) <= 2 and set(server.refused) == {("gpt-4o-mini", "max_tokens")}
    assert sum("max_tokens" in r["body"] for r in server.requests) == len(server.refused)


# Bodies that never end, or end too big ----------------------------------------------------

def test_the_timeout_bounds_a_calls_whole_answer_against_a_trickling_server(fake_openai: FakeOpenAI) -> None:
    fake_openai.always = "trickle"  # a byte every half second: no socket read ever times out
    started = time.monotonic()
    with pytest.raises(ModelError) as info:
        ask(fake_openai, timeout=1.0, max_retries=1)  # the SDK retries a timed-out attempt once
    assert time.monotonic() - started < 8  # without the bound: until the server gives up, 20 s an attempt
    assert str(info.value) == "ranker model call failed: timed out after 1s after 1 retry"
    assert info.value.transport and len(fake_openai.requests) == 2  # the breaker counts it


@pytest.mark.parametrize("fault", ["endless", "gzip_bomb"])
def test_an_answer_over_the_cap_is_read_no_further(fake_openai: FakeOpenAI, fault: str) -> None:
    """64 MiB sent (an endless chunked body, cut there) or inflated (a 64 KiB gzip body)."""
    fake_openai.always = fault
    with pytest.raises(ModelError) as info:
        ask(fake_openai, max_retries=2)
    once = " once decompressed" if fault == "gzip_bomb" else ""
    assert str(info.value) == f"ranker model call failed: the answer was too large (more than 8,388,608 bytes{once})"
    assert len(fake_openai.requests) == 1  # not asked again


def test_headers_trickled_past_the_backstop_end_the_call(fake_openai: FakeOpenAI,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The backstop: two timeouts (headers, then body) and 10 s; the server trickles a byte
    every 0.5 s for 15 s, so no read times out. The slack is cut to 1 s here (the call ends
    at 3 s, not 12 s): what is tested is that the backstop ends the call and says so."""
    assert bounded_body.backstop(1.0) == 12.0
    monkeypatch.setattr(bounded_body, "BACKSTOP_SLACK", 1.0)
    fake_openai.always = "trickle_headers"
    started = time.monotonic()
    with pytest.raises(ModelError) as info:
        ask(fake_openai, timeout=1.0)
    assert time.monotonic() - started < 5
    assert str(info.value) == "ranker model call failed: timed out after 3s (the answer's headers had not arrived)"


# The Batch API's ids and waits ------------------------------------------------------------

@pytest.mark.parametrize("shape", ["absolute", "relative"])
def test_a_batch_id_from_the_server_never_becomes_a_path(served_project: GeoProject, shape: str) -> None:
    victim = served_project.pytester.path / "victim.json"
    victim.write_text('{"mine": true}', encoding="utf-8")
    # The state file would be <cache>/batches/<id>.json: both ids name the victim instead.
    batch_id = str(victim.with_suffix("")) if shape == "absolute" else "../../victim"
    served_project.server.batches.id_for = lambda n: batch_id
    result = served_project.run(str(served_project.dataset(2)), "--geo-batch", "--geo-cache-dir", "cache")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines([f"*model call failed: batch request failed: the server's batch id '{batch_id[:12]}*"
                                 " is not an id (letters, digits, '_', '-', '.', ':')"])
    assert victim.read_text(encoding="utf-8") == '{"mine": true}'
    assert not list((served_project.pytester.path / "cache").rglob("*.json"))


def test_batch_polling_gives_up_after_its_bound_naming_the_batch(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    fake_openai.batches.delay = 3600.0  # in_progress for as long as the test lasts
    lines: list[str] = []

    async def go() -> object:
        client = BatchClient(OpenAIChatClient(KEY, fake_openai.url), tmp_path, window=0.05,
                             poll=PollPolicy(first=0.05, longest=0.2, most=0.6), status=lines.append)
        try:
            return await client.complete(RANKER)
        finally:
            await client.aclose()

    started = time.monotonic()
    with pytest.raises(ModelError) as info:
        asyncio.run(go())
    assert time.monotonic() - started < 5
    batch_id = fake_openai.batches.created[0]
    assert str(info.value) == (f"ranker model call failed: batch request failed: batch {batch_id} still in_progress "
                               "after 0.6s of waiting, the most a batch is waited for; a rerun resumes waiting for it")
    assert [p.stem for p in (tmp_path / "batches").glob("*.json")] == [batch_id]  # kept: a rerun resumes it


# Prompt caching (issue 39) ----------------------------------------------------------------

def test_cached_input_tokens_are_priced_at_the_cached_input_price(served_project: GeoProject) -> None:
    """gpt-4o-mini: $0.15 input, $0.075 cached input, $0.60 output per million tokens; the
    budget's settlement charges the same, its reservations (at the input price) above it."""
    server = served_project.server
    server.cached_share = 0.5
    result = served_project.priced().run(str(served_project.dataset(3)), "--geo-no-cache", "--geo-report", "r.json",
                                "--geo-budget", "1")
    result.assert_outcomes(passed=3)
    report = json.loads((served_project.pytester.path / "r.json").read_text(encoding="utf-8"))
    usage = report["usage"]
    calls = sum(role["calls"] for role in usage.values())
    cached = sum(role["cached_input_tokens"] for role in usage.values())
    assert cached == server.billed_cached > 0
    fresh = server.billed["prompt_tokens"] - cached
    expected = (fresh * 0.15 + cached * 0.075 + server.billed["completion_tokens"] * 0.60) * 1000  # nano-dollars
    cost = sum(role["cost_nanousd"] for role in usage.values())
    assert abs(cost - expected) <= calls  # each call's cost is rounded to a nano-dollar
    assert report["budget"]["spent_usd"] == cost / 1e9
    result.stdout.fnmatch_lines(["*ranker: calls=6 *cached_input_tokens=*"])


def test_a_cached_input_price_is_read_from_geo_prices_and_never_above_the_input_price() -> None:
    from pytest_geo.llm.prices import PriceError, parse_price_lines
    from pytest_geo.price import Price

    assert parse_price_lines(["m = 1, 4, 0.25"]) == {"m": Price(1.0, 4.0, 0.25)}
    assert Price(1.0, 4.0, 0.25).nanodollars(1000, 10, cached_tokens=400) == 600_000 + 100_000 + 40_000
    assert Price(1.0, 4.0).nanodollars(1000, 10, cached_tokens=400) == 1_040_000  # no cached price: input price
    with pytest.raises(PriceError, match="the cached-input price must be at most the input price"):
        parse_price_lines(["m = 1, 4, 2"])


# A worker killed mid-run ------------------------------------------------------------------

# The worker is known by its config, not PYTEST_XDIST_WORKER: under an outer `-n 2` the
# in-process run's controller is itself an outer worker, perhaps gw1, and was killed.
KILL_GW1_CONFTEST = '''
import os, signal

IS_GW1 = []

def pytest_configure(config):
    IS_GW1.append(getattr(config, "workerinput", {}).get("workerid") == "gw1")

def pytest_runtest_logreport(report):
    if IS_GW1 and IS_GW1[-1] and report.when == "call" and not os.path.exists("killed"):
        open("killed", "w").close()
        os.kill(os.getpid(), signal.SIGKILL)  # after its calls settled in the ledger, before its usage is sent
'''


def test_the_runs_cost_is_what_the_budget_ledger_charged_when_a_worker_dies(served_project: GeoProject) -> None:
    pytester = served_project.priced().pytester
    pytester.makeconftest(KILL_GW1_CONFTEST)
    result = pytester.runpytest(str(served_project.dataset(8)), "--geo-base-url", served_project.server.url,
                                "-n", "2", "--geo-no-cache", "--geo-budget", "1", "--geo-report", "r.json")
    assert (pytester.path / "killed").exists()
    report = json.loads((pytester.path / "r.json").read_text(encoding="utf-8"))
    lost = report["usage"]["lost with a worker"]
    assert lost["calls"] >= 1 and lost["cost_nanousd"] > 0
    assert report["budget"]["lost_calls"] == lost["calls"]
    assert report["cost"]["total"] == report["budget"]["spent_usd"]  # without it: below, by the dead worker's calls
    result.stdout.fnmatch_lines(["budget: *; of it $* for * calls of processes that died, counted in the usage as "
                                 "role 'lost with a worker'*"])
