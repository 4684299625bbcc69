"""Shared fixtures: pytester projects laid out like ones using pytest-geo (with the mock,
or wired to a fake OpenAI-compatible server on 127.0.0.1)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from fake_openai import FakeOpenAI

REPO = Path(__file__).resolve().parent.parent
PROMPTS = REPO / "pytest_geo" / "prompts"
SMOKE = REPO / "eval" / "datasets" / "geo_smoke.jsonl"

PROMPT_FILES = ("ranker_system.txt", "ranker_user.txt", "rewriter_system.txt", "rewriter_user.txt",
                "meta_optimizer_system.txt", "meta_optimizer_user.txt")

pytest_plugins = ["pytester"]

# After each in-process run pytester forgets every module that run was the first to import:
# every run against a fake server would import the SDK again (about 3 s on 2 busy cores) and
# its HTTP transport (about 0.1 s, imported by the first client made). Imported here, once
# for the session, they stay.
openai.OpenAI(api_key="unused", base_url="http://127.0.0.1:9/v1").close()
collect_ignore = ["corpus"]  # malformed inputs, run one by one by test_corpus.py

# The test layers (pyproject's markers): every test carries exactly one, so each layer
# can be run apart (`pytest -m unit` in under a minute) and a new test cannot skip it.
LAYERS = ("unit", "plugin", "xdist", "e2e", "browser", "real_model")
# Fixtures that run pytest-geo in a pytester session or start a server: never in a unit test.
NOT_UNIT_FIXTURES = frozenset({"pytester", "testdir", "geo_project", "counting_client", "served_project",
                               "fake_openai"})

# A scenario run in one process (the plugin layer) and again under two xdist workers (the
# xdist layer): only where what the workers change is what is tested.
ONE_PROCESS_AND_TWO_WORKERS = [pytest.param("0", marks=pytest.mark.plugin), pytest.param("2", marks=pytest.mark.xdist)]


def layer_problems(items: list[pytest.Item]) -> list[str]:
    """Why each of `items` is not marked with exactly one layer, or not the layer its
    fixtures show."""
    problems = []
    for item in items:
        layers = [mark.name for mark in item.iter_markers() if mark.name in LAYERS]
        if len(layers) != 1:
            problems.append(f"{item.nodeid}: {len(layers)} layer markers ({', '.join(layers) or 'none'})")
        elif layers == ["unit"] and NOT_UNIT_FIXTURES.intersection(item.fixturenames):
            used = ", ".join(sorted(NOT_UNIT_FIXTURES.intersection(item.fixturenames)))
            problems.append(f"{item.nodeid}: marked unit but uses {used}; mark it plugin or e2e")
    return problems


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    problems = layer_problems(items)
    if problems:
        raise pytest.UsageError(f"each test needs exactly one layer marker of {', '.join(LAYERS)} "
                                "(pyproject.toml says what each means):\n  " + "\n  ".join(problems))


TRACEBACK_MARKS = ("Traceback (most recent call last)", "raise ", ".py:[0-9]*: in ")


def no_traceback(result: pytest.RunResult) -> None:
    """Neither output of `result` shows a traceback: a failure reads as one clean line."""
    for mark in TRACEBACK_MARKS:
        result.stdout.no_fnmatch_line(f"*{mark}*")
        result.stderr.no_fnmatch_line(f"*{mark}*")


def copy_prompts(destination: Path, source: Path = PROMPTS) -> Path:
    """The E-GEO prompt files, by name: whatever else lies in the repo's prompts/ (a
    candidate left by the README's optimize example) stays out of the tests."""
    destination.mkdir(parents=True, exist_ok=True)
    for name in PROMPT_FILES:
        shutil.copy(source / name, destination / name)
    return destination


@pytest.fixture
def geo_project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A pytester dir with the repo's prompts and smoke dataset, and no key in the env."""
    copy_prompts(pytester.path / "prompts")
    (pytester.path / "data").mkdir()
    shutil.copy(SMOKE, pytester.path / "data" / "smoke.jsonl")
    pytester.makeini("[pytest]\n")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("GEO_EVAL_MOCK", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    return pytester


COUNTING_CONFTEST = '''
import json
from pytest_geo.llm.mock import MockClient

CALLS = []

class Counting(MockClient):
    async def complete(self, request):
        CALLS.append((request.role, request.context.get("query")))
        return await super().complete(request)

def pytest_geo_make_client(config, settings):
    return Counting()

def pytest_sessionfinish(session):
    (session.config.rootpath / "calls.json").write_text(json.dumps(CALLS))
'''


@pytest.fixture
def counting_client(geo_project: pytest.Pytester) -> pytest.Pytester:
    """Every model call is recorded in calls.json at the end of the run."""
    geo_project.makeconftest(COUNTING_CONFTEST)
    return geo_project


DUMMY_KEY = "sk-test-dummy-0000"


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI().start()
    yield server
    server.stop()


def geo_rows(n: int) -> list[dict[str, Any]]:
    """Rows whose target starts last of three and, with the mock logic (the E-GEO
    harness's: "Best for" first, then the longer description), ends first, in any order
    of the candidates: its description is 20+ characters shorter than the others (the
    harness's mock counts the ranker prompt's 19-character closing line into the last)."""
    return [
        {"query_id": f"r{i}", "query": f"red kettle number {i}", "target_id": f"t{i}",
         "candidates": [{"id": f"a{i}", "title": "Red kettle",
                         "description": f"red kettle number {i} with a matt finish and a base"},
                        {"id": f"b{i}", "title": "Kettle", "description": "a kettle with a long cord and a steel base"},
                        {"id": f"t{i}", "title": "Thing", "description": "steel, 1.7 litres"}]}
        for i in range(n)
    ]


# OpenAI's list prices of gpt-4o-mini, every role's default model (input, output and cached
# input, dollars per million tokens). The built-in table prices OpenAI's own API only
# (pytest_geo/llm/prices.py), so a test of cost against a fake server declares them.
GPT_4O_MINI_PRICES = "gpt-4o-mini = 0.15, 0.60, 0.075"


def prices_ini(*lines: str) -> str:
    """A pytest.ini declaring `lines` as geo_prices (none given: gpt-4o-mini's list prices)."""
    return "[pytest]\ngeo_prices =\n" + "".join(f"    {line}\n" for line in lines or (GPT_4O_MINI_PRICES,))


class GeoProject:
    def __init__(self, pytester: pytest.Pytester, server: FakeOpenAI) -> None:
        self.pytester = pytester
        self.server = server
        copy_prompts(pytester.path / "prompts")

    def priced(self, *lines: str) -> GeoProject:
        """The project's pytest.ini declares these prices (none given: gpt-4o-mini's list prices)."""
        self.pytester.makeini(prices_ini(*lines))
        return self

    def dataset(self, n: int, name: str = "rows.jsonl") -> Path:
        path = self.pytester.path / name
        path.write_text("".join(json.dumps(r) + "\n" for r in geo_rows(n)), encoding="utf-8")
        return path

    def args(self, *extra: str) -> list[str]:
        return ["--geo-base-url", self.server.url, "-p", "no:xdist", *extra]

    def run(self, *args: str) -> pytest.RunResult:
        return self.pytester.runpytest(*self.args(*args))


@pytest.fixture
def served_project(
    pytester: pytest.Pytester, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> GeoProject:
    """A pytester project whose model is the fake OpenAI server (a dummy key in the env)."""
    monkeypatch.setenv("OPENAI_API_KEY", DUMMY_KEY)
    for name in ("OPENAI_BASE_URL", "GEO_EVAL_MOCK", "RANKER_MODEL", "REWRITER_MODEL", "META_MODEL"):
        monkeypatch.delenv(name, raising=False)
    return GeoProject(pytester, fake_openai)


def egeo_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """`tmp_path` as the current directory, a dummy key in the env and no other model
    setting from it."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", DUMMY_KEY)
    for name in ("OPENAI_BASE_URL", "GEO_EVAL_MOCK", "RANKER_MODEL", "REWRITER_MODEL", "META_MODEL"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def egeo_fixture_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """As `egeo_env`, with the E-GEO-format fixture (tests/egeo_fixture) copied to `egeo/`."""
    shutil.copytree(Path(__file__).parent / "egeo_fixture", egeo_env(tmp_path, monkeypatch) / "egeo")
    return tmp_path


def egeo_workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rows: int) -> Path:
    """The current directory for an `egeo` test: `rows.jsonl` of `rows` rows (as `egeo_env`)."""
    egeo_env(tmp_path, monkeypatch)
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in geo_rows(rows)), encoding="utf-8")
    return tmp_path


def cache_entries(directory: Path) -> list[dict[str, Any]]:
    """Every entry line the answer cache at `directory` holds (llm/cache.py: JSON lines in
    `answers/*.jsonl`), parsed, in file order."""
    return [json.loads(line) for segment in sorted((directory / "answers").glob("*.jsonl"))
            for line in segment.read_bytes().splitlines() if line]


def rewrite_cache_entries(directory: Path, change: Any) -> int:
    """Replace each entry line in the cache at `directory` by `change(entry)` (a planted
    entry), written as the cache writes its lines (the key first); returns how many."""
    count = 0
    for segment in (directory / "answers").glob("*.jsonl"):
        lines = [json.loads(line) for line in segment.read_bytes().splitlines() if line]
        segment.write_text("".join(json.dumps(change(entry), separators=(",", ":")) + "\n" for entry in lines))
        count += len(lines)
    return count


# What a row's record and its calls carry that no two runs share: wall and model time, and
# (for calls answered from the cache) the tokens billed.
RUN_DEPENDENT = ("seconds", "model_seconds", "prompt_tokens", "completion_tokens")


def without_run_dependent(rows: Any) -> Any:
    """`rows` (report records) with the fields that differ between runs left out, at every depth
    (their calls and repeats too)."""
    if isinstance(rows, list):
        return [without_run_dependent(item) for item in rows]
    if isinstance(rows, dict):
        return {k: without_run_dependent(v) for k, v in rows.items() if k not in RUN_DEPENDENT}
    return rows
