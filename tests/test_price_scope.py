"""The built-in price table is OpenAI's list prices, so it prices calls to OpenAI's own
API only: a local server answering to the default model name `gpt-4o-mini` is unpriced
unless `geo_prices` says what its calls cost (issue 37), in the cost line, the JSON
report, the budget's check at start, egeo and the plan."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from fake_openai import FakeOpenAI

from conftest import PROMPTS, GeoProject, egeo_workdir, prices_ini
from pytest_geo.cli import main
from pytest_geo.llm.budget import priced_as
from pytest_geo.llm.endpoints import Endpoint
from pytest_geo.llm.prices import is_openai_api, price_table
from pytest_geo.price import Price
from pytest_geo.settings import Settings

# Every answer reports this usage: 2 rows make 6 calls (rank_before, rewrite, rank_after),
# each 200 prompt and 20 completion tokens, at gpt-4o-mini's $0.15 and $0.60 per million:
# $0.000042 a call, $0.000252 in all.
USAGE = {"prompt_tokens": 200, "completion_tokens": 20, "total_tokens": 220}


def report(project: GeoProject) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((project.pytester.path / "r.json").read_text(encoding="utf-8"))
    return data


@pytest.mark.plugin
def test_a_local_server_is_unpriced_without_geo_prices(served_project: GeoProject) -> None:
    served_project.server.usage_as = USAGE
    result = served_project.run(str(served_project.dataset(2)), "--geo-report", "r.json")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([
        "  ranker: calls=4 cache_hits=0 retries=0 errors=0 prompt_tokens=800 completion_tokens=80",
        "  rewriter: calls=2 cache_hits=0 retries=0 errors=0 prompt_tokens=400 completion_tokens=40",
        "cost: unknown, no price for the model of ranker, rewriter (the built-in prices are OpenAI's, for its own API "
        "only; add it to the ini option geo_prices); "
        "tokens above"])
    assert "$" not in result.stdout.str()
    data = report(served_project)
    assert data["cost"] == {"currency": "USD", "prices_date": "2025-08", "total": None, "saved_by_cache": None,
                            "unpriced_roles": ["ranker", "rewriter"],
                            "unreported_usage_roles": [],
                            "roles": {"ranker": {"cost": None, "saved_by_cache": None},
                                      "rewriter": {"cost": None, "saved_by_cache": None}}}
    assert (data["usage"]["ranker"]["unpriced_calls"], data["usage"]["rewriter"]["unpriced_calls"]) == (4, 2)


@pytest.mark.plugin
def test_a_dollar_budget_on_a_local_server_without_geo_prices_is_refused_at_start(served_project: GeoProject) -> None:
    result = served_project.run(str(served_project.dataset(2)), "--geo-budget", "1")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([
        "ERROR: --geo-budget: no price for the ranker model gpt-4o-mini (the built-in prices are OpenAI's, for its "
        "own API only), so its calls cannot be held to a budget in dollars: add it to the ini option geo_prices, "
        "or bound tokens with --geo-budget-tokens N"])
    assert served_project.server.requests == []


@pytest.mark.plugin
def test_a_geo_prices_line_prices_the_local_server(served_project: GeoProject) -> None:
    served_project.server.usage_as = USAGE
    result = served_project.priced("gpt-4o-mini = 0.15, 0.60").run(
        str(served_project.dataset(2)), "--geo-report", "r.json", "--geo-budget", "1")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([
        "  ranker: calls=4 cache_hits=0 retries=0 errors=0 prompt_tokens=800 completion_tokens=80 cost=$0.0001680",
        "  rewriter: calls=2 cache_hits=0 retries=0 errors=0 prompt_tokens=400 completion_tokens=40 cost=$0.00008400",
        "cost: $0.0002520 at list prices (2025-08 table and geo_prices)",
        "budget: $0.0002520 spent of $1.000*"])
    data = report(served_project)
    assert (data["cost"]["total"], data["cost"]["unpriced_roles"]) == (0.000252, [])
    assert data["budget"]["spent_usd"] == 0.000252


@pytest.mark.e2e
def test_egeo_prices_a_local_server_from_the_projects_geo_prices(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_openai: FakeOpenAI,
        capsys: pytest.CaptureFixture[str]) -> None:
    egeo_workdir(tmp_path, monkeypatch, rows=2)
    fake_openai.usage_as = USAGE
    flags = ["evaluate", "--dataset", "rows.jsonl", "--prompts", str(PROMPTS), "--base-url", fake_openai.url,
             "--no-cache", "--budget", "1"]
    assert main(flags) == 2
    assert capsys.readouterr().err == (
        "egeo: error: --budget: no price for the ranker model gpt-4o-mini (the built-in prices are OpenAI's, for its "
        "own API only), so its calls cannot be held to a budget in dollars: add it to the ini option geo_prices in "
        "the project's pytest configuration, or bound tokens with --budget-tokens N\n")
    assert fake_openai.requests == []
    (tmp_path / "pytest.ini").write_text(prices_ini("gpt-4o-mini = 0.15, 0.60"), encoding="utf-8")
    assert main(flags) == 0
    err = capsys.readouterr().err.splitlines()
    assert "cost: $0.0002520 at list prices (2025-08 table and geo_prices)" in err


@pytest.mark.e2e
def test_egeo_names_the_file_and_line_of_a_bad_price(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    egeo_workdir(tmp_path, monkeypatch, rows=1)
    (tmp_path / "pyproject.toml").write_text('[tool.pytest.ini_options]\ngeo_prices = ["m = 1, 2", "gpt = cheap"]\n',
                                             encoding="utf-8")
    assert main(["evaluate", "--dataset", "rows.jsonl", "--mock"]) == 2
    assert capsys.readouterr().err == (
        f"egeo: error: {tmp_path / 'pyproject.toml'}: ini option geo_prices: line 2 'gpt = cheap': expected "
        "'model = input_per_million, output_per_million[, cached_input_per_million[, cache_write_per_million]]'"
        "\n")


@pytest.mark.e2e
def test_egeo_plan_leaves_a_local_server_unpriced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  fake_openai: FakeOpenAI,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    egeo_workdir(tmp_path, monkeypatch, rows=2)
    flags = ["plan", "--dataset", "rows.jsonl", "--prompts", str(PROMPTS), "--base-url", fake_openai.url]
    assert main(flags) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].endswith(", no price") and out[2].endswith(", no price")
    assert "  not priced (no list price known; the ini option geo_prices adds one): gpt-4o-mini, gpt-4o-mini" in out
    (tmp_path / "pytest.ini").write_text(prices_ini(), encoding="utf-8")
    assert main(flags) == 0
    out = capsys.readouterr().out.splitlines()
    assert re.search(r", \$0\.\d+$", out[1]) and re.search(r", \$0\.\d+$", out[2]), out
    assert not any(line.startswith("  not priced") for line in out)
    assert fake_openai.requests == []


@pytest.mark.unit
def test_the_builtin_table_applies_on_openais_api_only() -> None:
    assert price_table({}, "https://api.openai.com/v1")["gpt-4o-mini"] == Price(0.15, 0.60, 0.075)
    assert price_table({}, "http://127.0.0.1:8000/v1") == {}
    assert price_table({}, "https://openrouter.ai/api/v1") == {}  # serves OpenAI's models at its own prices
    assert price_table({"gpt-4o-mini": Price(1, 2)}, "http://localhost:11434/v1") == {"gpt-4o-mini": Price(1, 2)}
    assert price_table({"gpt-4o-mini": Price(1, 2)}, "https://api.openai.com/v1")["gpt-4o-mini"] == Price(1, 2)
    assert (is_openai_api("https://api.openai.com"), is_openai_api("https://api.openai.com.evil.example/v1"),
            is_openai_api("http://[::1")) == (True, False, False)


@pytest.mark.unit
def test_a_model_is_priced_at_the_server_its_calls_go_to(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    local = Settings(prompts_dir=PROMPTS, base_url="http://127.0.0.1:8000/v1",
                     endpoints={"vllm": Endpoint("vllm", "http://10.0.0.5:8000/v1")})
    assert priced_as("gpt-4o-mini", local) == ("gpt-4o-mini", "http://127.0.0.1:8000/v1")
    assert priced_as("openai/gpt-4o-mini", local) == ("gpt-4o-mini", "https://api.openai.com/v1")
    assert priced_as("vllm/gpt-4o-mini", local) == ("gpt-4o-mini", "http://10.0.0.5:8000/v1")
    assert priced_as("gpt-4o-mini", Settings(prompts_dir=PROMPTS)) == ("gpt-4o-mini", "https://api.openai.com/v1")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://localhost:8080/v1")
    assert priced_as("gpt-4o-mini", Settings(prompts_dir=PROMPTS)) == ("gpt-4o-mini", "http://localhost:8080/v1")
