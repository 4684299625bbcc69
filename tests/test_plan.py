"""`egeo plan` and `pytest --geo-plan`: the run's calls, tokens, dollars and wall time,
printed before anything is spent; no request reaches the server, and the planned calls
are the run's."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from fake_openai import FakeOpenAI

from conftest import DUMMY_KEY, egeo_fixture_dir, prices_ini
from pytest_geo.cli import main

FIXTURE = Path(__file__).parent / "egeo_fixture"


@pytest.fixture
def egeo_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return egeo_fixture_dir(tmp_path, monkeypatch)


def calls_in(line: str) -> int:
    found = re.search(r": (\d+) calls", line)
    assert found is not None, line
    return int(found.group(1))


@pytest.mark.e2e
def test_egeo_plan_calls_nothing_and_counts_the_runs_calls(
        egeo_dir: Path, fake_openai: FakeOpenAI, capsys: pytest.CaptureFixture[str]) -> None:
    # The fake server has no built-in prices (OpenAI's API's only): the project declares them.
    (egeo_dir / "pytest.ini").write_text(prices_ini("gpt-5 = 1.25, 10", "gpt-4.1 = 2, 8", "gpt-4.1-mini = 0.4, 1.6"),
                                         encoding="utf-8")
    flags = ["--dataset", "egeo/test_data.json", "--no-cache", "--base-url", fake_openai.url,
             "--rewriter-model", "gpt-4.1", "--judge", "gpt5=gpt-5", "--judge", "other=gpt-4.1-mini",
             "--variant", "competitive", "--variant", "faq"]
    assert main(["plan", *flags]) == 0
    out = capsys.readouterr().out.splitlines()
    assert fake_openai.requests == []
    assert out[0] == "geo plan: 40 rows, 140 model calls (no model was called)"
    by_role = {line.split(" (")[0].strip(): calls_in(line) for line in out[1:4]}
    # gpt5's before-rankings are cached: rank_after only, per variant; the other judge also
    # ranks each row once before (shared by the variants); one rewrite per row and variant
    assert by_role == {"judge gpt5 gpt-5": 40, "judge other gpt-4.1-mini": 60, "rewriter gpt-4.1": 40}
    assert out[4].startswith("  at most $") and out[4].endswith(" at list prices")
    assert out[5] == "  wall time about 10 s at 256 rows in flight and 5 s a call"
    assert main(["plan", *flags, "--concurrency", "1"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "  wall time about 6.7 min at 1 row in flight and 5 s a call"
    main(["evaluate", *flags])
    assert len(fake_openai.requests) == 140  # the plan's count is the run's


@pytest.mark.e2e
def test_egeo_plan_prices_the_worst_case(egeo_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Dollars: estimated prompt tokens at the input price and every output cap at the output price."""
    main(["plan", "--dataset", "egeo/test_data.json", "--limit", "1", "--ranker-model", "gpt-4.1",
          "--rewriter-model", "gpt-4.1", "--max-output-tokens", "100"])
    out = capsys.readouterr().out.splitlines()
    found = re.match(r"  ranker gpt-4\.1 \(endpoint default\): 2 calls, ~([\d,]+) prompt tokens, <= 200 output "
                     r"tokens, \$([\d.]+)$", out[1])
    assert found is not None, out
    prompt = int(found.group(1).replace(",", ""))
    assert float(found.group(2)) == pytest.approx((prompt * 2.00 + 200 * 8.00) / 1e6, rel=1e-3)


@pytest.mark.plugin
def test_pytest_geo_plan_exits_before_any_call(pytester: pytest.Pytester, fake_openai: FakeOpenAI,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", DUMMY_KEY)
    shutil.copytree(FIXTURE, pytester.path / "egeo")
    result = pytester.runpytest("--geo-dataset", "egeo/test_data.json", "--geo-plan", "--geo-base-url",
                                fake_openai.url, "--geo-judge", "gpt5=gpt-5", "-p", "no:cacheprovider",
                                "-p", "no:xdist")
    result.stdout.fnmatch_lines(["geo plan: 20 rows, 40 model calls (no model was called)",
                                 "  judge gpt5 gpt-5 (endpoint default): 20 calls, *",
                                 "*geo: plan printed (--geo-plan); no model was called*"])
    assert result.ret == 0
    assert fake_openai.requests == []
    assert json.dumps(result.outlines).count("passed") == 0
    assert "partial run" not in result.stdout.str() and "pytest-geo evaluation" not in result.stdout.str()


def plan_line(lines: list[str], who: str) -> re.Match[str]:
    for line in lines:
        found = re.match(rf"  {who} .*: (\d+) calls, ~([\d,]+) prompt tokens(?: \(([\d,]+) cached\))?, "
                         r"<= ([\d,]+) output tokens, \$([\d.]+)(, Batch API)?$", line)
        if found is not None:
            return found
    raise AssertionError(f"no plan line for {who}: {lines}")


def number(text: str | None) -> int:
    return int((text or "0").replace(",", ""))


@pytest.mark.plugin
def test_plan_prices_long_system_prompts_as_cached_and_batches_only_where_offered(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """A judge's long system prompt sent again is priced at its cached-input price (the
    provider's prompt cache serves it); a short one is not cached; --geo-batch halves only
    the calls to an endpoint offering the Batch API (OpenAI's), not OpenRouter's."""
    monkeypatch.setenv("OPENAI_API_KEY", DUMMY_KEY)
    monkeypatch.setenv("OPENROUTER_API_KEY", DUMMY_KEY)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    shutil.copytree(FIXTURE, pytester.path / "egeo")
    (pytester.path / "long.txt").write_text("Rank the products by how well they fit. " * 600, encoding="utf-8")
    pytester.makeini("[pytest]\ngeo_judges =\n"
                     "    a = openai/gpt-5 system=long.txt max_output_tokens=100\n"
                     "    b = openrouter/x/m system=long.txt max_output_tokens=100\n"
                     "    c = openrouter/x/m max_output_tokens=100\n"
                     # priced under the name sent (x/m), as the run charges it
                     "geo_prices =\n    gpt-5 = 1.25, 10.00, 0.125\n    x/m = 2.00, 4.00\n")
    result = pytester.runpytest("--geo-dataset", "egeo/test_data.json", "--geo-limit", "2", "--geo-plan",
                                "--geo-batch", "-p", "no:cacheprovider", "-p", "no:xdist")
    assert result.ret == 0
    a, b, c = (plan_line(result.outlines, f"judge {name}") for name in "abc")
    for judge in (a, b, c):
        assert judge.group(1) == "4"  # 2 rows: 2 rank_before and 2 rank_after each
        assert judge.group(4) == "400"
    # the system prompt (24,000 characters: about 6,000 tokens) is served from the cache 3 times of 4
    assert number(a.group(3)) == number(b.group(3)) == 3 * (4 + 6000)
    assert c.group(3) is None  # the packaged ranker prompt is shorter than a cache's minimum
    prompt, cached = number(a.group(2)), number(a.group(3))
    assert float(a.group(5)) == pytest.approx(
        ((prompt - cached) * 1.25 + cached * 0.125 + 400 * 10.00) / 1e6 / 2, rel=1e-3)
    assert a.group(6) == ", Batch API" and b.group(6) is None and c.group(6) is None
    prompt = number(b.group(2))  # no cached price for x/m: the cached tokens at its input price
    assert float(b.group(5)) == pytest.approx((prompt * 2.00 + 400 * 4.00) / 1e6, rel=1e-3)
    assert any(line.startswith("  the same calls without prompt caching or the Batch API: at most $")
               for line in result.outlines)
