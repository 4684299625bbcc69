"""`egeo evaluate`: the seed's output, verbose lines, the mock, and errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_geo.cli import main

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parent.parent
SMOKE = REPO / "eval" / "datasets" / "geo_smoke.jsonl"
PROMPTS = REPO / "pytest_geo" / "prompts"


def test_mock_smoke_prints_the_seed_metrics(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["evaluate", "--dataset", str(SMOKE), "--limit", "5", "--mock", "--prompts", str(PROMPTS)])
    assert code == 0
    assert capsys.readouterr().out == (
        '{\n  "avg_rank_improvement": 2.0,\n  "n": 5,\n  "stderr_rank_improvement": 0.0,\n  "win_rate": 1.0\n}\n'
    )


def test_verbose_prints_a_line_per_row_first(capsys: pytest.CaptureFixture[str]) -> None:
    main(["evaluate", "--dataset", str(SMOKE), "--limit", "2", "--verbose", "--mock", "--prompts", str(PROMPTS)])
    lines = capsys.readouterr().out.splitlines()
    assert json.loads(lines[0]) == {
        "query_id": "q1", "target_id": "p1", "rank_before": 3, "rank_after": 1, "rank_improvement": 2,
    }
    assert json.loads(lines[1])["query_id"] == "q2"
    assert json.loads("\n".join(lines[2:]))["n"] == 2


def test_console_script_with_env_mock(tmp_path: Path) -> None:
    env = {**os.environ, "GEO_EVAL_MOCK": "1"}
    env.pop("OPENAI_API_KEY", None)
    out = subprocess.run(
        [sys.executable, "-m", "pytest_geo.cli", "evaluate", "--dataset", str(SMOKE), "--limit", "5"],
        cwd=REPO, env=env, capture_output=True, text=True, check=True,
    ).stdout
    assert json.loads(out) == {"avg_rank_improvement": 2.0, "n": 5, "stderr_rank_improvement": 0.0, "win_rate": 1.0}


def test_missing_key(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("GEO_EVAL_MOCK", raising=False)
    assert main(["evaluate", "--dataset", str(SMOKE), "--prompts", str(PROMPTS)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("egeo: error: no model credentials: set OPENAI_API_KEY")
    assert "--mock" in err


def test_missing_dataset(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["evaluate", "--dataset", str(tmp_path / "nope.jsonl"), "--mock"]) == 2
    assert f"{tmp_path / 'nope.jsonl'}: cannot read dataset" in capsys.readouterr().err


def test_malformed_lines_are_reported_and_fail_the_command(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text(SMOKE.read_text().splitlines()[0] + "\n{oops\n")
    assert main(["evaluate", "--dataset", str(data), "--mock", "--prompts", str(PROMPTS)]) == 1
    captured = capsys.readouterr()
    assert f"{data}:2: invalid JSON" in captured.err
    assert json.loads(captured.out)["n"] == 1


def test_evaluate_prints_the_fact_violation_rate_on_stderr(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A mock rewriter that invents a weight in every rewrite.
    monkeypatch.setattr("pytest_geo.llm.mock.rewrite", lambda context: f"{context['description']} Weighs 97 kg.")
    assert main(["evaluate", "--dataset", str(SMOKE), "--limit", "3", "--mock", "--prompts", str(PROMPTS)]) == 0
    captured = capsys.readouterr()
    assert "new facts: fact_violation_rate=1.0000 (3 of 3 rewrites add facts not in the original)" in captured.err
    assert set(json.loads(captured.out)) == {"n", "avg_rank_improvement", "win_rate", "stderr_rank_improvement"}
