"""The E-GEO leaderboard's submission files, in the shapes its code reads."""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_geo.options import submission_meta
from pytest_geo.report.egeo_submission import judge_key

FIXTURE = Path(__file__).parent / "egeo_fixture"


@pytest.mark.unit
@pytest.mark.parametrize(("model", "key"), [
    ("openrouter/openai/gpt-5", "gpt_5"), ("anthropic/claude-sonnet-4.5", "claude_sonnet_4_5"),
    ("google/gemini-3-flash-preview", "gemini_3_flash_preview"), ("deepseek/deepseek-v3.2", "deepseek_v3_2"),
    ("meta-llama/Llama-4-Maverick", "llama_4_maverick"), ("gpt-4.1", "gpt_4_1")])
def test_judges_are_keyed_as_the_leaderboard_keys_them(model: str, key: str) -> None:
    assert judge_key(model) == key


@pytest.mark.unit
def test_submission_metadata_is_checked() -> None:
    assert submission_meta("name = my run") == ("name", "my run")
    with pytest.raises(argparse.ArgumentTypeError, match="KEY one of name, contact, type"):
        submission_meta("colour=red")
    with pytest.raises(argparse.ArgumentTypeError, match="type is one of model\\+prompt, fine-tuned, agent"):
        submission_meta("type=magic")


def check_files(folder: Path, expect_rows: int) -> None:
    lines = [json.loads(line) for line in (folder / "rewrites.jsonl").read_text().splitlines()]
    selected = json.loads((FIXTURE / "test_selected_products.json").read_text())
    assert len(lines) == expect_rows
    for line in lines:
        assert set(line) == {"query_id", "rand_idx", "initial_product", "optimized_product", "judges"}
        assert line["rand_idx"] == selected[line["query_id"]]["ind"]
        assert line["initial_product"] and line["optimized_product"]
        assert set(line["judges"]) == {"gpt_5", "claude_sonnet_4_5"}
    results = json.loads((folder / "results.json").read_text())
    assert set(results) == {"per_ranker", "total_queries_scored", "total_input_tokens", "total_output_tokens",
                            "estimated_usd_cost"}
    for key in ("gpt_5", "claude_sonnet_4_5"):
        values = [line["judges"][key]["improvement"] for line in lines if line["judges"][key]["improvement"] is not None]
        mean = sum(values) / len(values)
        se = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1)) / math.sqrt(len(values))
        assert results["per_ranker"][key] == {"mean": round(mean, 4), "se": round(se, 4)}
    claude = [line for line in lines if line["query_id"] == "10133"]
    assert claude == [] or claude[0]["judges"]["claude_sonnet_4_5"]["improvement"] is None  # not in its cache
    metadata = json.loads((folder / "metadata.json").read_text())
    assert (metadata["name"], metadata["contact"], metadata["type"], metadata["query_blind"]) == (
        "demo", "me@example.com", "model+prompt", True)
    assert metadata["judges"] == ["openrouter/openai/gpt-5", "openrouter/anthropic/claude-sonnet-4.5"]


@pytest.mark.plugin
def test_pytest_writes_the_three_files_per_variant(pytester: pytest.Pytester) -> None:
    shutil.copytree(FIXTURE, pytester.path / "egeo")
    result = pytester.runpytest("--geo-dataset", "egeo/test_data.json", "--geo-mock", "-p", "no:cacheprovider",
                                "--geo-judge", "gpt5=openrouter/openai/gpt-5",
                                "--geo-judge", "claude=openrouter/anthropic/claude-sonnet-4.5",
                                "--geo-variant", "competitive", "--geo-variant", "faq",
                                "--geo-egeo-submission", "out", "--geo-submission-meta", "name=demo",
                                "--geo-submission-meta", "contact=me@example.com")
    result.assert_outcomes(passed=38, failed=2)  # query 10133 is not in claude's cache: its items fail
    for variant in ("competitive", "faq"):
        check_files(pytester.path / "out" / variant, 20)


@pytest.mark.e2e
def test_egeo_writes_them_too(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pytest_geo", "evaluate", "--dataset", str(FIXTURE / "test_data.json"), "--mock",
         "--judge", "gpt5=openrouter/openai/gpt-5", "--judge", "claude=openrouter/anthropic/claude-sonnet-4.5",
         "--egeo-submission", "out", "--submission-meta", "name=demo", "--submission-meta", "contact=me@example.com"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert "E-GEO submission written to out" in done.stderr
    check_files(tmp_path / "out", 20)


@pytest.mark.plugin
def test_two_judges_on_one_model_are_refused_before_any_call(pytester: pytest.Pytester,
                                                             monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """Seen with the real model as two judges (one cached, one not): both keyed `qwen`, so
    results.json kept one judge's figures and dropped the other's without a word."""
    from pytest_geo.cli import main

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-dummy-0000")
    monkeypatch.setenv("GEO_EVAL_MOCK", "1")
    shutil.copytree(FIXTURE, pytester.path / "egeo")
    result = pytester.runpytest("--geo-dataset", "egeo/test_data.json", "--geo-judge", "gpt5=local/qwen",
                                "--geo-judge", "fresh=other/qwen", "--geo-egeo-submission", "out",
                                "-p", "no:cacheprovider", "-p", "no:xdist")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--geo-egeo-submission: judges gpt5 and fresh would both be 'qwen' in the "
                                 "leaderboard's files*"])
    assert not (pytester.path / "out").exists()
    monkeypatch.chdir(pytester.path)
    capsys.readouterr()
    assert main(["evaluate", "--dataset", "egeo/test_data.json", "--mock", "--judge", "gpt5=qwen",
                 "--judge", "fresh=qwen", "--egeo-submission", "out2"]) == 2
    assert not (pytester.path / "out2").exists()
    assert capsys.readouterr().err == (
        "egeo: error: --egeo-submission: judges gpt5 and fresh would both be 'qwen' in the leaderboard's files (its "
        "keys are the judges' model ids): give each judge its own model, or leave one out of the submission run\n")
