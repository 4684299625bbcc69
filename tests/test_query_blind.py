"""E-GEO's rewriting rule: a query-blind rewriter (on for E-GEO data), and rewriting
prompts written for E-GEO's script (`{description}`) that run unchanged."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_geo.templates import PromptError, from_egeo_format

FIXTURE = Path(__file__).parent / "egeo_fixture"
SMOKE = Path(__file__).resolve().parent.parent / "eval" / "datasets" / "geo_smoke.jsonl"
SEES_QUERY = "Query: {{query}}\nTitle: {{title}}\nDescription: {{description}}\n"


@pytest.mark.unit
def test_an_egeo_format_prompt_becomes_a_template_and_ours_stay_as_they_are() -> None:
    egeo = 'Product:\n{description}\nAnswer as {{"text": "..."}}.'
    assert from_egeo_format(egeo) == 'Product:\n{{title}}\n{{description}}\nAnswer as {"text": "..."}.'
    ours = "Title: {{title}}\n{{description}}\n{not a field}"
    assert from_egeo_format(ours) == ours
    assert from_egeo_format("no fields at all") == "no fields at all"
    with pytest.raises(PromptError, match=r"unknown field \{query\}: an E-GEO rewriting prompt has only"):
        from_egeo_format("{query} and {description}")
    with pytest.raises(PromptError, match="not a valid E-GEO"):
        from_egeo_format("{description} and a lone { brace")


@pytest.fixture
def egeo_project(pytester: pytest.Pytester) -> pytest.Pytester:
    shutil.copytree(FIXTURE, pytester.path / "egeo")
    return pytester


def transcripts(path: Path) -> list[dict[str, object]]:
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        return [json.loads(line) for line in lines]


@pytest.mark.plugin
def test_egeo_data_runs_query_blind_with_the_packaged_prompts(egeo_project: pytest.Pytester) -> None:
    result = egeo_project.runpytest("--geo-dataset", "egeo/test_data.json", "--geo-mock", "-p", "no:cacheprovider",
                                    "-k", "10000 or 10007", "--geo-report", "r.json")
    result.assert_outcomes(passed=2, deselected=18)
    rewrites = [call for line in transcripts(egeo_project.path / "r.transcripts.jsonl.gz")
                for call in line["calls"] if call["role"] == "rewriter"]  # type: ignore[union-attr]
    assert len(rewrites) == 2
    for call in rewrites:
        text = json.dumps(call["messages"])
        assert "last me a lifetime" not in text  # the query
        assert "Use only what the title and description say" in text  # the simple style


@pytest.mark.plugin
def test_a_rewriter_that_sees_the_query_is_refused_before_any_call(egeo_project: pytest.Pytester) -> None:
    (egeo_project.path / "sees.txt").write_text(SEES_QUERY)
    result = egeo_project.runpytest("--geo-dataset", "egeo/test_data.json", "--geo-mock", "-p", "no:cacheprovider",
                                    "--geo-variant", "sees=sees.txt", "--geo-variant", "faq")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: variant sees: *sees.txt: the rewriter user prompt uses {{query}}, but the run "
                                 "is query-blind (--geo-query-blind, on for E-GEO data)*"])


@pytest.mark.plugin
def test_the_flag_makes_a_jsonl_run_query_blind(pytester: pytest.Pytester) -> None:
    shutil.copy(SMOKE, pytester.path / "d.jsonl")
    prompts = pytester.path / "prompts"
    shutil.copytree(Path(__file__).resolve().parent.parent / "pytest_geo" / "prompts", prompts,
                    ignore=shutil.ignore_patterns("styles", "redteam"))
    assert pytester.runpytest("d.jsonl", "--geo-mock", "-p", "no:cacheprovider").ret == 0
    result = pytester.runpytest("d.jsonl", "--geo-mock", "-p", "no:cacheprovider", "--geo-query-blind")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: *prompts: the rewriter user prompt uses {{query}}, but the run is query-blind*"])


@pytest.mark.e2e
def test_egeo_refuses_it_too_and_runs_an_egeo_format_prompt_unchanged(tmp_path: Path) -> None:
    (tmp_path / "sees.txt").write_text(SEES_QUERY)
    (tmp_path / "theirs.txt").write_text('Make this listing persuasive:\n{description}\nReturn {{"a": 1}}.\n')
    base = [sys.executable, "-m", "pytest_geo", "evaluate", "--dataset", str(FIXTURE / "test_data.json"), "--mock",
            "--limit", "2"]
    refused = subprocess.run([*base, "--variant", "sees=sees.txt"], cwd=tmp_path, capture_output=True, text=True)
    assert refused.returncode == 2 and "is query-blind" in refused.stderr and refused.stdout == ""
    ran = subprocess.run([*base, "--variant", "theirs=theirs.txt", "--variant", "simple", "--report", "r.json"],
                         cwd=tmp_path, capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["theirs"]["n"] == 2
    sent = [json.dumps(call["messages"]) for line in transcripts(tmp_path / "r.transcripts.jsonl.gz")
            for call in line["calls"] if call["role"] == "rewriter"]  # type: ignore[union-attr]
    assert any('Make this listing persuasive:\\n' in text and 'Return {\\"a\\": 1}.' in text for text in sent)
