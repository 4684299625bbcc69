"""Requests as real models accept them (llm/profiles.py, llm/healing.py, llm/stack.py):
reasoning models get no temperature and `max_completion_tokens`, a refused parameter is
healed once per model and process, a 400 no change fixes stops the run, and the time
and concurrency defaults fit the server. Against tests/fake_openai.py, which refuses
what OpenAI refuses for reasoning models, through the real SDK."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
from fake_openai import FakeOpenAI

from conftest import ONE_PROCESS_AND_TWO_WORKERS, PROMPTS, GeoProject, cache_entries, egeo_workdir
from pytest_geo.cli import main
from pytest_geo.llm.base import ChatRequest, ChatResponse, ModelError, RequestRefused
from pytest_geo.llm.cache import cache_key
from pytest_geo.llm.healing import HealingClient
from pytest_geo.llm.profiles import Lesson, Refusal, apply_lessons, lesson_for, request_body
from pytest_geo.settings import build_settings


def xdist_args(workers: str) -> list[str]:
    if workers == "0":
        return ["-p", "no:xdist"]
    pytest.importorskip("xdist")
    return ["-n", workers]


def run(project: GeoProject, workers: str, *args: str) -> pytest.RunResult:
    return project.pytester.runpytest("--geo-base-url", project.server.url, *xdist_args(workers), *args)


def bodies(server: FakeOpenAI) -> list[dict[str, Any]]:
    return [request["body"] for request in server.requests]


@pytest.mark.plugin
def test_reasoning_models_are_sent_what_they_accept(served_project: GeoProject) -> None:
    dataset = str(served_project.dataset(6))
    result = run(served_project, "0", dataset, "--geo-ranker-model", "gpt-5-mini",
                 "--geo-rewriter-model", "gpt-5-mini", "--geo-reasoning-effort", "low")
    result.assert_outcomes(passed=6)
    server = served_project.server
    assert server.refused == []  # the table knew: not one call refused
    sent = bodies(server)
    assert len(sent) == 18 and all("temperature" not in body and body["reasoning_effort"] == "low" for body in sent)
    assert "requests changed" not in result.stdout.str()


@pytest.mark.plugin
def test_chat_models_keep_temperature_zero_and_get_no_reasoning_effort(served_project: GeoProject) -> None:
    result = served_project.run(str(served_project.dataset(2)), "--geo-reasoning-effort", "high")
    result.assert_outcomes(passed=2)
    sent = bodies(served_project.server)
    assert [body["temperature"] for body in sent] == [0.0] * 6
    assert not any("reasoning_effort" in body for body in sent)  # gpt-4o-mini does not take it


@pytest.mark.plugin
def test_an_explicit_temperature_a_reasoning_model_refuses_is_dropped_once(
    served_project: GeoProject
) -> None:
    dataset = str(served_project.dataset(12))
    result = run(served_project, "0", dataset, "--geo-ranker-model", "gpt-5-mini", "--geo-rewriter-model",
                 "gpt-5-mini", "--geo-temperature", "0", "--geo-report", "r.json", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=12)
    refused = served_project.server.refused
    assert refused and set(refused) == {("gpt-5-mini", "temperature")}
    assert len(refused) <= 1  # at most one refused call per model and process
    line = "gpt-5-mini: sent without temperature (the server refused 0)"
    assert result.stdout.lines.count(f"  {line}") == 1
    report = json.loads((served_project.pytester.path / "r.json").read_text())
    assert report["request_changes"] == [{"model": "gpt-5-mini", "param": "temperature", "replacement": None,
                                          "refused": "0", "text": line}]


@pytest.mark.plugin
def test_an_unknown_model_refusing_temperature_is_healed(served_project: GeoProject) -> None:
    served_project.server.refuses_temperature = {"acme-thinker-2"}
    dataset = str(served_project.dataset(10))
    result = run(served_project, "0", dataset, "--geo-ranker-model", "acme-thinker-2",
                 "--geo-rewriter-model", "acme-thinker-2", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=10)
    refused = served_project.server.refused
    assert len(refused) == 1
    result.stdout.fnmatch_lines(["requests changed to what the server accepts:",
                                 "  acme-thinker-2: sent without temperature (the server refused 0)"])
    sent = bodies(served_project.server)
    assert len(sent) == 30 + len(refused) and sum("temperature" in body for body in sent) == len(refused)


@pytest.mark.plugin
def test_a_later_run_starts_with_what_the_server_refused(served_project: GeoProject) -> None:
    """The change is remembered beside the answer cache: the next run sends the healed
    request from its first call, says so in its `geo:` header, and its cache keys (the
    body as sent) find every answer."""
    server = served_project.server
    server.refuses_temperature = {"acme-thinker-2"}
    dataset = str(served_project.dataset(3))
    flags = ("--geo-ranker-model", "acme-thinker-2", "--geo-rewriter-model", "acme-thinker-2")
    served_project.run(dataset, *flags).assert_outcomes(passed=3)
    assert len(server.refused) == 1 and len(server.requests) == 1 + 9
    server.reset()
    again = served_project.run(dataset, *flags, "--geo-report", "r.json")
    again.assert_outcomes(passed=3)
    assert server.requests == []  # nothing refused, every answer from the cache
    change = "acme-thinker-2: sent without temperature (the server refused 0)"
    [header] = [line for line in again.stdout.lines if line.startswith("geo: ")]
    assert header.endswith(f"; requests as the server accepts them: {change}")
    report = json.loads((served_project.pytester.path / "r.json").read_text())
    assert [c["text"] for c in report["request_changes"]] == [change]
    assert report["usage"]["ranker"]["cache_hits"] == 6 and report["usage"]["rewriter"]["cache_hits"] == 3
    served_project.run(dataset, *flags, "--geo-no-cache").assert_outcomes(passed=3)
    assert len(server.refused) == 1  # without the cache directory, learned again


@pytest.mark.unit
def test_cache_keys_differ_by_every_parameter_sent() -> None:
    request = ChatRequest("ranker", "gpt-5-mini", ({"role": "user", "content": "hi"},))
    assert cache_key("u", request) != cache_key("u", ChatRequest("ranker", "gpt-4o-mini", request.messages))
    effort = ChatRequest("ranker", "gpt-5-mini", request.messages, reasoning_effort="low")
    assert cache_key("u", request) != cache_key("u", effort)
    assert cache_key("u", request) == cache_key("u", ChatRequest("ranker", "gpt-5-mini", request.messages))


@pytest.mark.plugin
def test_the_cache_keys_on_the_very_bytes_the_server_received(served_project: GeoProject) -> None:
    """A request is encoded once: the bytes posted are the bytes its cache key hashes."""
    served_project.run(str(served_project.dataset(2)), "--geo-cache-dir", "answers").assert_outcomes(passed=2)
    url = served_project.server.url.rstrip("/").encode()
    received = {hashlib.sha256(b'{"base_url":"' + url + b'","body":' + raw + b',"format":2}').hexdigest()
                for raw in served_project.server.raw_bodies}
    assert len(received) == 6
    assert {entry["key"] for entry in cache_entries(served_project.pytester.path / "answers")} == received


@pytest.mark.parametrize("workers", ONE_PROCESS_AND_TWO_WORKERS)
def test_a_400_no_change_fixes_stops_the_run_once(served_project: GeoProject, workers: str) -> None:
    served_project.server.always = "400"
    dataset = str(served_project.dataset(40))
    result = run(served_project, workers, dataset, "--geo-report", "r.json", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(failed=1, skipped=40)
    lines = result.stdout.lines
    start = lines.index(next(line for line in lines if "_ pytest-geo::model_server _" in line))
    message = lines[start + 1]
    # The row's ranker and rewriter calls go out together: either may be refused first.
    assert re.match(r"cannot use 127\.0\.0\.1 for model gpt-4o-mini: the server refused the request as sent "
                    r"\((ranker|rewriter) model call failed: HTTP 400 \(Unrecognized request argument supplied: "
                    r"stream_mode\)\)", message), message
    assert message.endswith("; 40 row(s) not run")
    assert len(served_project.server.requests) <= 2 * 8 * max(int(workers), 1)  # the first calls in flight, none again
    assert "sk-test-dummy" not in result.stdout.str()


@pytest.mark.plugin
def test_an_unfixable_400_after_success_is_the_row_error(served_project: GeoProject) -> None:
    served_project.server.fault_for = lambda body: "400" if "red kettle number 3" in json.dumps(body) else None
    result = served_project.run(str(served_project.dataset(4)), "--geo-concurrency", "1")
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines(["rows.jsonl:4: error: * model call failed: HTTP 400 (Unrecognized request argument supplied: "
                                 "stream_mode)"])


@pytest.mark.plugin
def test_openai_timeout_seconds_sets_the_call_timeout(served_project: GeoProject,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    served_project.server.slow_seconds = 3
    served_project.server.fail_next("slow")
    monkeypatch.setenv("OPENAI_TIMEOUT_SECONDS", "0.5")
    result = served_project.run(str(served_project.dataset(1)), "--geo-max-retries", "0", "--geo-concurrency", "1")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*model call failed: timed out after 0.5s*"])


@pytest.mark.plugin
def test_a_bad_openai_timeout_seconds_is_a_usage_error(served_project: GeoProject,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_TIMEOUT_SECONDS", "soon")
    result = served_project.run(str(served_project.dataset(1)))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: OPENAI_TIMEOUT_SECONDS='soon' is not a number of seconds above 0"])


@pytest.mark.unit
def test_time_and_concurrency_defaults_fit_the_server(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_TIMEOUT_SECONDS", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    remote = build_settings({"base_url": "https://api.openai.com/v1"})
    assert (remote.timeout, remote.start_concurrency, remote.max_concurrency) == (60.0, 16, 256)
    for url in ("http://127.0.0.1:8080/v1", "http://localhost:11434/v1", "http://192.168.1.20:8000/v1"):
        local = build_settings({"base_url": url})
        assert (local.timeout, local.start_concurrency, local.max_concurrency) == (600.0, 1, 256), url
    given = build_settings({"base_url": "http://127.0.0.1:8080/v1", "timeout": 30.0, "max_concurrency": 64})
    assert (given.timeout, given.max_concurrency) == (30.0, 64)
    monkeypatch.setenv("OPENAI_TIMEOUT_SECONDS", "120")
    assert build_settings({"base_url": "http://127.0.0.1:8080/v1"}).timeout == 120.0
    assert build_settings({"timeout": 5.0}).timeout == 5.0  # the flag wins over the variable
    monkeypatch.setenv("OPENAI_BASE_URL", "http://10.0.0.7:8000/v1")
    assert build_settings({}).start_concurrency == 1


@pytest.mark.plugin
def test_a_local_server_starts_with_one_row_in_flight(served_project: GeoProject) -> None:
    server = served_project.server
    arrivals: list[tuple[float, int]] = []  # (when, requests in flight) as each request arrives
    server.holds = lambda body: arrivals.append((time.monotonic(), server.in_flight)) is None
    server.hold_seconds = 0.5
    result = served_project.run(str(served_project.dataset(3)), "--geo-report", "r.json")
    result.assert_outcomes(passed=3)
    first = arrivals[0][0]
    # One row (two requests) while the first calls are held; more only after they came back.
    assert [flight for when, flight in arrivals if when - first < 0.4] == [1, 2]
    concurrency = json.loads((served_project.pytester.path / "r.json").read_text())["concurrency"]
    assert concurrency["mode"] == "auto" and concurrency["start"] == 1 and concurrency["maximum"] == 256


@pytest.mark.plugin
def test_help_names_the_flags_and_the_local_defaults(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--help")
    text = " ".join(result.stdout.str().split())
    assert "--geo-reasoning-effort=none|minimal|low|medium|high|xhigh" in text
    assert "--geo-structured=auto|on|off" in text
    assert "env: OPENAI_TIMEOUT_SECONDS; default: 60, 600 for a server on this machine or a private network" in text


@pytest.mark.plugin
def test_a_reasoning_effort_outside_openais_levels_is_refused_at_start(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--geo-reasoning-effort", "max")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--geo-reasoning-effort: 'max' is not one of none, minimal, low, medium, high, "
                                 "xhigh*"])


# The profile table and the lessons a 400 teaches, read from OpenAI's documented bodies.

MAX_TOKENS_REFUSED = {"error": {"message": "Unsupported parameter: 'max_tokens' is not supported with this model. "
                                           "Use 'max_completion_tokens' instead.", "type": "invalid_request_error",
                                "param": "max_tokens", "code": "unsupported_parameter"}}


@pytest.mark.unit
def test_profiles_name_each_familys_parameters() -> None:
    messages = ({"role": "user", "content": "hi"},)

    def body(model: str, **given: Any) -> dict[str, Any]:
        sent = request_body(ChatRequest("ranker", model, messages, **given))
        return {k: v for k, v in sent.items() if k not in ("model", "messages")}

    assert body("gpt-4o-mini", max_output_tokens=900) == {"temperature": 0.0, "max_tokens": 900}
    assert body("gpt-5-mini", max_output_tokens=900, reasoning_effort="low") == {
        "max_completion_tokens": 900, "reasoning_effort": "low"}
    assert body("o3-2025-04-16", temperature=0.2) == {"temperature": 0.2}  # set by the user: sent
    assert body("gpt-5.1", max_output_tokens=5) == {"temperature": 0.0, "max_completion_tokens": 5}
    assert body("gpt-5.1", reasoning_effort="medium") == {"reasoning_effort": "medium"}  # reasoning on
    assert body("qwen2.5-coder-1.5b", max_output_tokens=5, reasoning_effort="low") == {
        "temperature": 0.0, "max_tokens": 5, "reasoning_effort": "low"}
    schema = {"title": "ranking", "type": "object"}
    assert body("gpt-4o-mini", response_schema=schema)["response_format"] == {
        "type": "json_schema", "json_schema": {"name": "ranking", "schema": schema, "strict": True}}


@pytest.mark.unit
def test_a_refused_max_tokens_becomes_max_completion_tokens() -> None:
    sent = {"model": "acme-2", "messages": [], "temperature": 0.0, "max_tokens": 900}
    lesson = lesson_for(Refusal.from_body(MAX_TOKENS_REFUSED), sent)
    assert lesson == Lesson("acme-2", "max_tokens", "max_completion_tokens")
    assert lesson.text() == "acme-2: sent max_completion_tokens instead of max_tokens (the server refused max_tokens)"
    assert apply_lessons(dict(sent), {"max_tokens": lesson}) == {
        "model": "acme-2", "messages": [], "temperature": 0.0, "max_completion_tokens": 900}


@pytest.mark.unit
def test_a_400_naming_no_parameter_we_sent_teaches_nothing() -> None:
    sent = {"model": "m", "messages": [], "temperature": 0.0}
    too_long = Refusal("Invalid 'messages[1].content': string too long.", "messages[1].content",
                       "string_above_max_length")
    assert lesson_for(too_long, sent) is None
    assert lesson_for(Refusal("'top_p' is not supported", "top_p", "unsupported_parameter"), sent) is None
    quoted = Refusal("Unsupported parameter: 'temperature' is not supported with this model.")
    assert lesson_for(quoted, sent) == Lesson("m", "temperature")  # a server without param or code


class RefusesResponseFormat:
    """A backend whose server refuses any response format, as OpenAI words it."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    async def complete(self, request: ChatRequest) -> ChatResponse:
        body = dict(request.body)  # type: ignore[attr-defined]
        self.bodies.append(body)
        if "response_format" in body:
            refusal = Refusal("Invalid parameter: 'response_format' of type 'json_schema' is not supported with "
                              "this model.", "response_format", None)
            raise RequestRefused("ranker model call failed: HTTP 400", refusal)
        return ChatResponse(text="{}")

    async def aclose(self) -> None:
        pass


def structured_calls(mode: str) -> tuple[RefusesResponseFormat, HealingClient, list[tuple[str, bool]]]:
    backend = RefusesResponseFormat()
    failures: list[tuple[str, bool]] = []

    def on_unfixable(request: ChatRequest, exc: ModelError, why: str, always: bool) -> None:
        failures.append((why, always))

    healing = HealingClient(backend, structured=mode, on_unfixable=on_unfixable)
    request = ChatRequest("ranker", "local-model", ({"role": "user", "content": "rank"},),
                          response_schema={"title": "ranking", "type": "object"})

    async def three() -> None:
        for _ in range(3):
            try:
                await healing.complete(request)
            except ModelError:
                pass

    asyncio.run(three())
    return backend, healing, failures


@pytest.mark.unit
def test_structured_auto_falls_back_to_plain_answers_once() -> None:
    backend, healing, failures = structured_calls("auto")
    assert ["response_format" in body for body in backend.bodies] == [True, False, False, False]
    assert [lesson.text() for lesson in healing.learned] == [
        "local-model: sent without response_format (the server refused it)"]
    assert failures == []


@pytest.mark.unit
def test_structured_on_makes_the_refusal_a_run_failure() -> None:
    backend, healing, failures = structured_calls("on")
    assert failures[0] == ("the server refused response_format, which --geo-structured on requires", True)
    assert healing.learned == [] and all("response_format" in body for body in backend.bodies)
    remembered = Lesson("local-model", "response_format")
    assert HealingClient(backend, structured="on", lessons=[remembered]).learned == []  # asked for anyway
    assert HealingClient(backend, structured="auto", lessons=[remembered]).learned == [remembered]


@pytest.mark.unit
def test_structured_off_never_sends_a_response_format() -> None:
    backend, healing, failures = structured_calls("off")
    assert len(backend.bodies) == 3 and not any("response_format" in body for body in backend.bodies)
    assert healing.learned == [] and failures == []


# egeo: the same flags, variable and summary lines.

@pytest.mark.e2e
def test_egeo_heals_sends_reasoning_effort_and_reads_the_timeout_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_openai: FakeOpenAI, capsys: pytest.CaptureFixture[str]
) -> None:
    egeo_workdir(tmp_path, monkeypatch, rows=3)
    fake_openai.refuses_temperature = {"acme-thinker-2"}
    fake_openai.slow_seconds = 3
    fake_openai.fault_for = lambda body: "slow" if "red kettle number 2" in json.dumps(body) else None
    monkeypatch.setenv("OPENAI_TIMEOUT_SECONDS", "1")
    code = main(["evaluate", "--dataset", "rows.jsonl", "--prompts", str(PROMPTS), "--no-cache", "--base-url",
                 fake_openai.url, "--ranker-model", "acme-thinker-2", "--rewriter-model", "acme-thinker-2",
                 "--reasoning-effort", "low", "--max-retries", "0", "--concurrency", "1"])
    err = capsys.readouterr().err
    assert code == 1  # the row that timed out
    assert "requests changed to what the server accepts:\n  acme-thinker-2: sent without temperature (the server " \
           "refused 0)\n" in err
    assert "rows.jsonl: r2: error: ranker model call failed: timed out after 1s" in err
    assert fake_openai.refused == [("acme-thinker-2", "temperature")]
    assert all(request["body"]["reasoning_effort"] == "low" for request in fake_openai.requests)


@pytest.mark.plugin
def test_batch_lines_are_shaped_like_ordinary_calls(served_project: GeoProject) -> None:
    server = served_project.server
    result = served_project.run(str(served_project.dataset(2)), "--geo-batch", "--geo-ranker-model", "gpt-5-mini",
                                "--geo-rewriter-model", "gpt-5-mini", "--geo-reasoning-effort", "minimal",
                                "--geo-no-cache")
    result.assert_outcomes(passed=2)
    lines = [json.loads(line) for batch_id in server.batches.created
             for line in server.batches.files[server.batches.batches[batch_id].input_file_id].splitlines()]
    assert len(lines) == 6
    assert [sorted(line["body"]) for line in lines] == [
        ["max_completion_tokens", "messages", "model", "reasoning_effort", "response_format"]] * 6
