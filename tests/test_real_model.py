"""End to end against a real model served locally (../shared/real-model: llama.cpp through
node-llama-cpp, OpenAI-compatible): 3 GEO rows of the smoke dataset and one suite row,
structured answers on, at default settings but the base URL. Slow (minutes) and never in
CI: they run only when GEO_REAL_MODEL_URL names the server."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from conftest import SMOKE, copy_prompts

URL = os.environ.get("GEO_REAL_MODEL_URL", "")

pytestmark = [
    pytest.mark.real_model,
    pytest.mark.skipif(not URL, reason="GEO_REAL_MODEL_URL is not set (a real model server, see README)"),
]

SUITE = '''
from pathlib import Path
import pytest_geo

headline = pytest_geo.prompt("headline", Path("headline.txt"))

headline_eval = pytest_geo.suite("headline", data={"items": [("red kettle, 1.7 litres", "kettle")]})

@headline_eval.metric
def names_it(items, expected):
    out = headline(items)
    return expected in out.lower(), f"said {out!r}"
'''


@pytest.fixture
def real_project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "GEO_EVAL_MOCK", "RANKER_MODEL", "REWRITER_MODEL",
                 "META_MODEL", "OPENAI_TIMEOUT_SECONDS"):
        monkeypatch.delenv(name, raising=False)
    copy_prompts(pytester.path / "prompts")
    pytester.makeini("[pytest]\n")
    return pytester


def errors(report_path: str) -> list[str]:
    report = json.loads(open(report_path, encoding="utf-8").read())
    return [f"{row['nodeid']}: {row['error']}" for row in report["rows"] if row.get("error")]


def test_three_geo_rows_score_without_error(real_project: pytest.Pytester) -> None:
    shutil.copy(SMOKE, real_project.path / "smoke.jsonl")
    result = real_project.runpytest("smoke.jsonl", "--geo-base-url", URL, "--geo-limit", "3", "--geo-structured", "on",
                                    "--geo-no-cache", "--geo-report", "r.json", "-p", "no:xdist")
    assert errors(str(real_project.path / "r.json")) == []
    result.assert_outcomes(passed=3, deselected=5)


def test_a_suite_row_scores_without_error(real_project: pytest.Pytester) -> None:
    real_project.makefile(".txt", headline="Write a short product headline for: {{input}}\n")
    real_project.makepyfile(test_headline=SUITE)
    result = real_project.runpytest("--geo-base-url", URL, "--geo-structured", "on", "--geo-no-cache",
                                    "--geo-report", "r.json", "-p", "no:xdist")
    assert errors(str(real_project.path / "r.json")) == []
    assert result.ret in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED)  # scored; the model may miss the word
