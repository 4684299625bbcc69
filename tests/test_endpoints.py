"""Endpoints (llm/endpoints.py, llm/stack.py): a model's prefix names the server its calls
go to, each endpoint with its own client stack and its own key; providers with another
wire format register through an entry point (llm/providers.py). Fake servers on
127.0.0.1 stand for the endpoints; each records the headers it was sent."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_openai import FakeOpenAI

from conftest import DUMMY_KEY, ONE_PROCESS_AND_TWO_WORKERS, PROMPTS, GeoProject, copy_prompts, egeo_workdir, geo_rows
from pytest_geo.cli import main
from pytest_geo.data.dataset import GeoRow, iter_dataset
from pytest_geo.engine.session import GeoSession
from pytest_geo.llm.base import ChatRequest, ModelError, ServerUnusable
from pytest_geo.llm.endpoints import Endpoint, EndpointError, parse_endpoint_lines, resolve
from pytest_geo.llm.stack import build_stack
from pytest_geo.settings import Settings

TESTS = Path(__file__).resolve().parent
KEYS = {"RANK_KEY": "sk-rank-1111111111", "REWRITE_KEY": "sk-rewrite-2222222222"}
MODEL_VARIABLES = ("OPENAI_BASE_URL", "GEO_EVAL_MOCK", "RANKER_MODEL", "REWRITER_MODEL", "META_MODEL",
                   "ANTHROPIC_API_KEY", "MSGS_API_KEY", *KEYS)


# --- naming ------------------------------------------------------------------------------

@pytest.mark.unit
def test_every_known_prefix_names_its_provider_s_url_and_key_variable() -> None:
    found = {}
    for name in ("openai", "openrouter", "anthropic", "gemini", "deepseek", "together", "groq", "mistral",
                 "fireworks", "ollama"):
        endpoint, sent = resolve(f"{name}/some-model", {})
        assert endpoint is not None and sent == "some-model"
        found[name] = (endpoint.base_url, endpoint.key_variable)
    assert found == {
        "openai": ("https://api.openai.com/v1", "OPENAI_API_KEY"),
        "openrouter": ("https://openrouter.ai/api/v1", "OPENROUTER_API_KEY"),
        "anthropic": ("https://api.anthropic.com/v1", "ANTHROPIC_API_KEY"),
        "gemini": ("https://generativelanguage.googleapis.com/v1beta/openai", "GEMINI_API_KEY"),
        "deepseek": ("https://api.deepseek.com", "DEEPSEEK_API_KEY"),
        "together": ("https://api.together.ai/v1", "TOGETHER_API_KEY"),
        "groq": ("https://api.groq.com/openai/v1", "GROQ_API_KEY"),
        "mistral": ("https://api.mistral.ai/v1", "MISTRAL_API_KEY"),
        "fireworks": ("https://api.fireworks.ai/inference/v1", "FIREWORKS_API_KEY"),
        "ollama": ("http://localhost:11434/v1", None),
    }


@pytest.mark.unit
def test_only_the_first_part_is_stripped_and_unknown_first_parts_stay_whole() -> None:
    endpoint, sent = resolve("openrouter/anthropic/claude-sonnet-4.5", {})
    assert (endpoint and endpoint.name, sent) == ("openrouter", "anthropic/claude-sonnet-4.5")
    assert resolve("Qwen/Qwen2.5-7B", {}) == (None, "Qwen/Qwen2.5-7B")
    assert resolve("gpt-4o-mini", {}) == (None, "gpt-4o-mini")
    assert resolve("ollama/", {}) == (None, "ollama/")


@pytest.mark.unit
def test_geo_endpoints_lines_add_endpoints_and_override_known_ones() -> None:
    endpoints = parse_endpoint_lines(["# local servers", "", "vllm = http://10.0.0.5:8000/v1/",
                                      "anthropic = http://127.0.0.1:9999/v1 MY_ANTHROPIC_KEY"])
    assert endpoints == {"vllm": Endpoint("vllm", "http://10.0.0.5:8000/v1", None),
                         "anthropic": Endpoint("anthropic", "http://127.0.0.1:9999/v1", "MY_ANTHROPIC_KEY")}
    assert resolve("vllm/Qwen/Qwen2.5-7B", endpoints) == (endpoints["vllm"], "Qwen/Qwen2.5-7B")
    assert resolve("anthropic/claude", endpoints)[0] == endpoints["anthropic"]


@pytest.mark.parametrize(("line", "problem"), [
    ("vllm http://x:8000/v1", "expected 'NAME = BASE_URL [KEY_VARIABLE]'"),
    ("a/b = http://x:8000/v1", "endpoint name 'a/b' must be letters, digits"),
    ("vllm = ftp://x/v1", "base URL 'ftp://x/v1' is not an http:// or https:// URL with a host"),
    ("vllm = http://x/v1 sk-live-123", "key variable 'sk-live-123' is not an environment variable name"),
    ("vllm = http://x/v1 KEY extra", "expected 'NAME = BASE_URL [KEY_VARIABLE]'"),
])
@pytest.mark.unit
def test_a_malformed_line_is_an_error_naming_the_line(line: str, problem: str) -> None:
    with pytest.raises(EndpointError) as caught:
        parse_endpoint_lines(["ok = http://127.0.0.1:1/v1", line])
    assert str(caught.value).startswith(f"line 2 {line!r}: {problem}")


@pytest.mark.plugin
def test_the_ini_option_s_malformed_line_is_a_usage_error(geo_project: pytest.Pytester) -> None:
    geo_project.makeini("[pytest]\ngeo_endpoints =\n    ok = http://127.0.0.1:1/v1\n    bad = nowhere\n")
    result = geo_project.runpytest("-p", "no:cacheprovider", "data/smoke.jsonl", "--geo-mock")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*tox.ini: ini option geo_endpoints: line 2 'bad = nowhere': base URL 'nowhere' is not an http:// or https:// URL with a host"])


# --- routing over fake servers -------------------------------------------------------------

@pytest.fixture
def servers() -> Iterator[dict[str, FakeOpenAI]]:
    """One fake server per endpoint, at different latencies, and the default server."""
    made = {"rank": FakeOpenAI(latency=0.01), "rewrite": FakeOpenAI(latency=0.04), "default": FakeOpenAI()}
    for server in made.values():
        server.start()
    yield made
    for server in made.values():
        server.stop()


@pytest.fixture
def endpoint_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in MODEL_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", DUMMY_KEY)
    for name, key in KEYS.items():
        monkeypatch.setenv(name, key)


def endpoints_ini(servers: dict[str, FakeOpenAI]) -> str:
    return (f"[pytest]\ngeo_endpoints =\n    rank = {servers['rank'].url} RANK_KEY\n"
            f"    rewrite = {servers['rewrite'].url} REWRITE_KEY\n")


def sent(server: FakeOpenAI, header: str = "authorization") -> tuple[set[str], set[str | None]]:
    """The models a server was asked for, and the values of `header` it was sent."""
    return {r["body"].get("model") for r in server.requests}, {r["headers"].get(header) for r in server.requests}


@pytest.mark.plugin
@pytest.mark.usefixtures("endpoint_env")
def test_each_role_goes_to_its_own_endpoint_with_its_own_key(pytester: pytest.Pytester,
                                                              servers: dict[str, FakeOpenAI]) -> None:
    GeoProject(pytester, servers["default"]).dataset(6)
    pytester.makeini(endpoints_ini(servers))
    servers["rewrite"].fail_next("500", "429")  # faults on one endpoint: retried there
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "-p", "no:xdist", "rows.jsonl", "--geo-base-url", servers["default"].url,
        "--geo-ranker-model", "rank/ranker-m", "--geo-rewriter-model", "rewrite/org/rewriter-m")
    result.assert_outcomes(passed=6)
    assert len(servers["rank"].requests) == 12  # rank_before and rank_after of each row
    assert sent(servers["rank"]) == ({"ranker-m"}, {f"Bearer {KEYS['RANK_KEY']}"})
    assert len(servers["rewrite"].requests) == 6 + 2
    assert sent(servers["rewrite"]) == ({"org/rewriter-m"}, {f"Bearer {KEYS['REWRITE_KEY']}"})
    assert servers["default"].requests == []


@pytest.mark.plugin
@pytest.mark.usefixtures("endpoint_env")
def test_bare_and_unknown_prefixed_models_keep_the_default_server(pytester: pytest.Pytester,
                                                                  servers: dict[str, FakeOpenAI]) -> None:
    GeoProject(pytester, servers["default"]).dataset(3)
    pytester.makeini(endpoints_ini(servers))
    result = pytester.runpytest("-p", "no:cacheprovider", "-p", "no:xdist", "rows.jsonl",
                                "--geo-base-url", servers["default"].url,
                                "--geo-ranker-model", "Qwen/Qwen2.5-7B", "--geo-rewriter-model", "rank/r")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["geo: model ranker=Qwen/Qwen2.5-7B rewriter=rank/r, server 127.0.0.1, "
                                 "endpoint rank (127.0.0.1), prompts *"])
    assert sent(servers["default"]) == ({"Qwen/Qwen2.5-7B"}, {f"Bearer {DUMMY_KEY}"})
    assert sent(servers["rank"]) == ({"r"}, {f"Bearer {KEYS['RANK_KEY']}"})
    assert servers["rewrite"].requests == []


@pytest.mark.usefixtures("endpoint_env")
@pytest.mark.parametrize("workers", ONE_PROCESS_AND_TWO_WORKERS)
def test_an_endpoint_that_goes_down_stops_only_its_calls_and_is_named(pytester: pytest.Pytester,
                                                                      servers: dict[str, FakeOpenAI],
                                                                      workers: str) -> None:
    GeoProject(pytester, servers["default"]).dataset(24)
    pytester.makeini(endpoints_ini(servers))
    down = servers["rewrite"]
    down.fault_for = lambda body: "500" if len(down.requests) > 4 else None  # down after its 4th call
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "-n", workers, "rows.jsonl", "--geo-concurrency", "2", "--geo-max-retries", "0",
        "--geo-ranker-model", "rank/ranker-m", "--geo-rewriter-model", "rewrite/rewriter-m", "-rs")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*stopped calling endpoint rewrite (127.0.0.1) (model rewriter-m) after 8 "
                                 "consecutive failed calls*"])
    assert "calling endpoint rank" not in result.stdout.str() and "use endpoint rank" not in result.stdout.str()
    assert sent(servers["rank"])[1] == {f"Bearer {KEYS['RANK_KEY']}"}


def _settings(servers: dict[str, FakeOpenAI], **more: object) -> Settings:
    settings = Settings(prompts_dir=PROMPTS, use_cache=False, max_retries=0, timeout=5.0, timeout_given=True,
                        base_url=servers["default"].url,
                        endpoints={"rank": Endpoint("rank", servers["rank"].url, "RANK_KEY"),
                                   "rewrite": Endpoint("rewrite", servers["rewrite"].url, "REWRITE_KEY")})
    for name, value in more.items():
        setattr(settings, name, value)
    return settings


@pytest.mark.e2e
@pytest.mark.usefixtures("endpoint_env")
def test_a_failing_endpoint_fails_its_calls_while_the_others_answer(servers: dict[str, FakeOpenAI]) -> None:
    stack = build_stack(_settings(servers))
    servers["rewrite"].always = "500"
    calls = 12

    def request(model: str) -> ChatRequest:
        return ChatRequest(role="rewriter", model=model, messages=[{"role": "user", "content": "hello"}])

    async def run() -> tuple[list[str], int]:
        failures = []
        for _ in range(calls):
            try:
                await stack.client.complete(request("rewrite/m"))
            except (ModelError, ServerUnusable) as exc:
                failures.append(type(exc).__name__)
        answered = 0
        for _ in range(3):
            await stack.client.complete(request("rank/m"))
            answered += 1
        await stack.client.aclose()
        return failures, answered

    failures, answered = asyncio.run(run())
    assert failures == ["ModelError"] * 8 + ["ServerUnusable"] * (calls - 8)  # the breaker: 8 in a row
    assert answered == 3
    assert stack.stopped is not None and stack.stopped.startswith("stopped calling endpoint rewrite (127.0.0.1)")
    assert stack.stacks["rank"].breaker.tripped is None
    assert len(servers["rewrite"].requests) == 8
    assert set(stack.usage_by_endpoint()) == {"rank", "rewrite"}


@pytest.mark.e2e
@pytest.mark.usefixtures("endpoint_env")
def test_an_endpoint_without_a_key_variable_gets_no_one_else_s_key(servers: dict[str, FakeOpenAI]) -> None:
    settings = _settings(servers)
    settings.endpoints["ollama"] = Endpoint("ollama", servers["rank"].url)  # the known one, moved to a fake
    stack = build_stack(settings, needed=[("ranker", "ollama/llama3")])

    async def run() -> None:
        await stack.client.complete(ChatRequest(role="ranker", model="ollama/llama3",
                                                messages=[{"role": "user", "content": "hello"}]))
        await stack.client.aclose()

    asyncio.run(run())
    assert sent(servers["rank"]) == ({"llama3"}, {"Bearer sk-no-key-local-server"})
    assert servers["default"].requests == []


@pytest.mark.e2e
@pytest.mark.usefixtures("endpoint_env")
def test_the_budget_is_one_ledger_and_usage_is_kept_per_endpoint(servers: dict[str, FakeOpenAI], tmp_path: Path) -> None:
    """Without a ledger file the ledger lives in memory: each endpoint's calls must still
    draw on the same one, or the run could spend the budget once per endpoint."""
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in geo_rows(12)), encoding="utf-8")
    rows = [r for r in iter_dataset(tmp_path / "rows.jsonl", 7) if isinstance(r, GeoRow)]
    budget = 8000
    settings = _settings(servers, budget_tokens=budget, concurrency=1, max_output_tokens=256,
                         models={"ranker": "rank/r", "rewriter": "rewrite/w", "optimizer": "o"})
    session = GeoSession(settings, build_stack(settings))
    try:
        outcomes = session.evaluate(rows)
    finally:
        session.close()
    by_endpoint = session.usage_by_endpoint()
    assert {name: sorted(table) for name, table in by_endpoint.items()} == {"rank": ["ranker"],
                                                                         "rewrite": ["rewriter"]}
    assert session.usage_table()["ranker"]["calls"] == by_endpoint["rank"]["ranker"]["calls"] > 0
    billed = [sum(server.billed.values()) for server in (servers["rank"], servers["rewrite"])]
    assert all(billed) and sum(billed) <= budget
    assert any(o.not_run for o in outcomes) and not all(o.not_run for o in outcomes)


@pytest.mark.plugin
@pytest.mark.usefixtures("endpoint_env")
def test_a_role_on_an_endpoint_without_its_key_fails_at_start_naming_it(pytester: pytest.Pytester,
                                                                        servers: dict[str, FakeOpenAI],
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    GeoProject(pytester, servers["default"]).dataset(2)
    pytester.makeini(endpoints_ini(servers))
    monkeypatch.delenv("RANK_KEY")
    result = pytester.runpytest("-p", "no:cacheprovider", "-p", "no:xdist", "rows.jsonl",
                                "--geo-base-url", servers["default"].url, "--geo-ranker-model", "rank/r")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*the ranker model rank/r: endpoint rank (127.0.0.1) needs its key in RANK_KEY, "
                                 "which is not set (a key goes only to its own endpoint)"])
    result = pytester.runpytest("-p", "no:cacheprovider", "-p", "no:xdist", "rows.jsonl",
                                "--geo-rewriter-model", "anthropic/claude-x")
    result.stderr.fnmatch_lines(["*the rewriter model anthropic/claude-x: endpoint anthropic (api.anthropic.com) "
                                 "needs its key in ANTHROPIC_API_KEY, which is not set*"])
    assert [s.requests for s in servers.values()] == [[], [], []]


@pytest.mark.plugin
@pytest.mark.usefixtures("endpoint_env")
def test_judges_on_keyless_local_endpoints_need_no_default_server(pytester: pytest.Pytester,
                                                                  servers: dict[str, FakeOpenAI],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """With judges the ranker is never asked: only the judges' and the rewriter's
    endpoints are checked at start, and a run on local servers needs no OPENAI_API_KEY."""
    monkeypatch.delenv("OPENAI_API_KEY")
    GeoProject(pytester, servers["default"]).dataset(2)
    pytester.makeini(f"[pytest]\ngeo_endpoints =\n    a = {servers['rank'].url}\n    b = {servers['rewrite'].url}\n"
                     "    locked = http://127.0.0.1:9/v1 LOCKED_KEY\n")
    result = pytester.runpytest("-p", "no:cacheprovider", "-p", "no:xdist", "rows.jsonl",
                                "--geo-judge", "one=a/m1", "--geo-judge", "two=b/m2", "--geo-rewriter-model", "b/w")
    result.assert_outcomes(passed=2)
    assert sent(servers["rank"])[0] == {"m1"} and sent(servers["rewrite"])[0] == {"m2", "w"}
    assert servers["default"].requests == []
    result = pytester.runpytest("-p", "no:cacheprovider", "-p", "no:xdist", "rows.jsonl",
                                "--geo-judge", "one=a/m1", "--geo-judge", "three=locked/m3", "--geo-rewriter-model", "b/w")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*the judge three model locked/m3: endpoint locked (127.0.0.1) needs its key in "
                                 "LOCKED_KEY, which is not set*"])


@pytest.mark.plugin
@pytest.mark.usefixtures("endpoint_env")
def test_the_mock_answers_every_endpoint_without_keys(geo_project: pytest.Pytester,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", *KEYS):
        monkeypatch.delenv(name, raising=False)
    geo_project.makeini("[pytest]\ngeo_endpoints =\n    rank = http://127.0.0.1:9/v1 RANK_KEY\n")
    result = geo_project.runpytest("-p", "no:cacheprovider", "-p", "no:xdist", "data/smoke.jsonl", "--geo-mock",
                                   "--geo-ranker-model", "rank/r", "--geo-rewriter-model", "anthropic/claude-x")
    result.assert_outcomes(passed=8)


# --- egeo ----------------------------------------------------------------------------------

@pytest.mark.e2e
@pytest.mark.usefixtures("endpoint_env")
def test_egeo_routes_roles_to_the_endpoints_it_is_given(servers: dict[str, FakeOpenAI], tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    egeo_workdir(tmp_path, monkeypatch, rows=4)
    for name, key in KEYS.items():
        monkeypatch.setenv(name, key)
    args = ["evaluate", "--dataset", "rows.jsonl", "--prompts", str(PROMPTS), "--no-cache",
            "--base-url", servers["default"].url, "--endpoint", f"rank={servers['rank'].url},RANK_KEY",
            "--endpoint", f"rewrite={servers['rewrite'].url},REWRITE_KEY",
            "--ranker-model", "rank/ranker-m", "--rewriter-model", "rewrite/rewriter-m"]
    assert main(args) == 0
    assert sent(servers["rank"]) == ({"ranker-m"}, {f"Bearer {KEYS['RANK_KEY']}"})
    assert sent(servers["rewrite"]) == ({"rewriter-m"}, {f"Bearer {KEYS['REWRITE_KEY']}"})
    assert servers["default"].requests == []
    monkeypatch.delenv("REWRITE_KEY")
    capsys.readouterr()
    assert main(args) == 2
    assert ("the rewriter model rewrite/rewriter-m: endpoint rewrite (127.0.0.1) needs its key in REWRITE_KEY"
            in capsys.readouterr().err)


@pytest.mark.e2e
@pytest.mark.usefixtures("endpoint_env")
def test_egeo_optimize_checks_the_optimizer_s_endpoint_at_start(servers: dict[str, FakeOpenAI], tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    egeo_workdir(tmp_path, monkeypatch, rows=2)
    prompts = copy_prompts(tmp_path / "prompts")
    code = main(["optimize-prompts", "--train", "rows.jsonl", "--val", "rows.jsonl", "--prompts", str(prompts),
                 "--base-url", servers["default"].url, "--meta-model", "anthropic/claude-x"])
    assert code == 2
    assert ("the optimizer model anthropic/claude-x: endpoint anthropic (api.anthropic.com) needs its key in "
            "ANTHROPIC_API_KEY, which is not set") in capsys.readouterr().err
    assert servers["default"].requests == []


@pytest.mark.unit
def test_egeo_refuses_a_malformed_endpoint(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["evaluate", "--dataset", "rows.jsonl", "--endpoint", "rank=127.0.0.1:8000"])
    assert ("argument --endpoint: 'rank=127.0.0.1:8000': base URL '127.0.0.1:8000' is not an http:// or https:// "
            "URL with a host") in capsys.readouterr().err


# --- a provider with its own wire format -----------------------------------------------------

def register_provider(directory: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Installs tests/fake_provider.py as a package would: an entry point in a dist-info."""
    info = directory / "fake_geo_provider-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-geo-provider\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[pytest_geo.providers]\nmsgs = fake_provider:MessagesProvider\n")
    monkeypatch.syspath_prepend(str(directory))
    monkeypatch.syspath_prepend(str(TESTS))
    monkeypatch.setenv("PYTHONPATH", f"{directory}:{TESTS}")


@pytest.mark.plugin
@pytest.mark.usefixtures("endpoint_env")
def test_a_registered_provider_speaks_its_own_wire_format(pytester: pytest.Pytester,
                                                          servers: dict[str, FakeOpenAI],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    register_provider(pytester.path / "site", monkeypatch)
    monkeypatch.setenv("MSGS_API_KEY", "msgs-secret-3333")
    GeoProject(pytester, servers["default"]).dataset(4)
    pytester.makeini(f"[pytest]\ngeo_endpoints =\n    msgs = {servers['rewrite'].url} MSGS_API_KEY\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-n", "0", "rows.jsonl",
                                           "--geo-base-url", servers["default"].url,
                                           "--geo-ranker-model", "msgs/ranker-m")
    result.assert_outcomes(passed=4)
    messages = servers["rewrite"].requests
    assert len(messages) == 8 and {r["headers"][":path"] for r in messages} == {"/v1/messages"}
    assert sent(servers["rewrite"], "x-api-key") == ({"ranker-m"}, {"msgs-secret-3333"})
    assert {r["headers"].get("authorization") for r in messages} == {None}
    assert {r["headers"][":path"] for r in servers["default"].requests} == {"/v1/chat/completions"}
    assert sent(servers["default"]) == ({"gpt-4o-mini"}, {f"Bearer {DUMMY_KEY}"})


@pytest.mark.plugin
def test_a_provider_that_cannot_load_is_named_at_start(geo_project: pytest.Pytester,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    site = geo_project.path / "site"
    register_provider(site, monkeypatch)
    (site / "fake_geo_provider-1.0.dist-info" / "entry_points.txt").write_text(
        "[pytest_geo.providers]\nmsgs = no_such_module:Provider\n")
    monkeypatch.setenv("OPENAI_API_KEY", DUMMY_KEY)
    result = geo_project.runpytest("-p", "no:cacheprovider", "-p", "no:xdist", "data/smoke.jsonl",
                                   "--geo-ranker-model", "msgs/m")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*provider 'msgs' (no_such_module:Provider, entry point group "
                                 "pytest_geo.providers) cannot be loaded: ModuleNotFoundError*"])
    assert "no_such_module" not in sys.modules


@pytest.mark.e2e
@pytest.mark.usefixtures("endpoint_env")
def test_every_endpoints_auto_controller_adds_its_rows_to_the_runs(servers: dict[str, FakeOpenAI]) -> None:
    """A row waits on every endpoint it calls, so the rows in flight are the sum of each
    endpoint's controller's (each loopback endpoint starts at 1 row); a fixed N stays N."""
    models = {**Settings(prompts_dir=PROMPTS).models, "ranker": "rank/m", "rewriter": "rewrite/m"}
    stack = build_stack(_settings(servers, models=models))
    fixed = build_stack(_settings(servers, models=models, concurrency=3))
    try:
        rank, rewrite = stack.stacks["rank"].concurrency, stack.stacks["rewrite"].concurrency
        assert rank.rows is rewrite.rows is stack.concurrency.rows
        assert stack.concurrency.rows.limit == 2
        assert fixed.concurrency.rows.limit == 3
    finally:
        for built in (stack, fixed):
            asyncio.run(built.client.aclose())
