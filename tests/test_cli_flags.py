"""`egeo evaluate` with the plugin's run flags (--report, --html, --repeats, --timeout,
--max-retries, --sample), progress and usage on stderr, and messages naming its flags."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fake_openai import FakeOpenAI
from test_reporting import validate

from conftest import PROMPTS, GeoProject, egeo_workdir, prices_ini
from pytest_geo import __version__
from pytest_geo.cli import main
from pytest_geo.report import progress


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return egeo_workdir(tmp_path, monkeypatch, rows=12)


def evaluate(*args: str) -> int:
    return main(["evaluate", "--dataset", "rows.jsonl", "--prompts", str(PROMPTS), "--no-cache", *args])


def read(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


@pytest.mark.e2e
def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"egeo {__version__}"


@pytest.mark.e2e
def test_report_and_html_with_repeats(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert evaluate("--mock", "--limit", "3", "--repeats", "2", "--report", "r.json", "--html", "r.html") == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["n"] == 3  # stdout stays the metrics JSON
    report = read(workdir / "r.json")
    validate(report)
    assert [row["nodeid"] for row in report["rows"]] == [f"rows.jsonl::r{i}" for i in range(3)]
    assert all(len(row["repeats"]) == 2 for row in report["rows"])
    assert report["metadata"]["repeats"] == 2
    assert (workdir / "r.html").read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert err.splitlines()[-3:] == ["report written to r.json", "HTML report written to r.html",
                                     "transcripts written to r.transcripts.jsonl.gz"]


@pytest.mark.e2e
def test_a_report_that_cannot_be_written_is_one_line_and_the_other_is_written(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (workdir / "taken").mkdir()  # a directory where the JSON report should go
    assert evaluate("--mock", "--limit", "2", "--report", "taken", "--html", "r.html") == 1
    out, err = capsys.readouterr()
    assert json.loads(out)["n"] == 2  # the metrics still print
    assert "egeo: --report: cannot write taken: " in err and "Traceback" not in err
    assert "HTML report written to r.html" in err and "report written to taken" not in err
    assert (workdir / "r.html").read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


@pytest.mark.plugin
def test_sample_picks_the_rows_the_plugin_picks(served_project: GeoProject, capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    dataset = served_project.dataset(20)
    monkeypatch.chdir(served_project.pytester.path)
    assert main(["evaluate", "--dataset", dataset.name, "--mock", "--sample", "4", "--seed", "9",
                 "--report", "egeo.json", "--prompts", "prompts"]) == 0
    served_project.pytester.runpytest(dataset.name, "--geo-mock", "--geo-sample", "4", "--geo-seed", "9",
                                      "--geo-report", "pytest.json", "-p", "no:xdist").assert_outcomes(passed=4)
    picked = [sorted(r["nodeid"] for r in read(served_project.pytester.path / name)["rows"])
              for name in ("egeo.json", "pytest.json")]
    assert picked[0] == picked[1] and len(picked[0]) == 4


@pytest.mark.e2e
def test_max_retries_and_timeout(workdir: Path, fake_openai: FakeOpenAI, capsys: pytest.CaptureFixture[str]) -> None:
    fake_openai.always = "500"
    assert evaluate("--base-url", fake_openai.url, "--limit", "1", "--max-retries", "1") == 1
    assert "after 1 retry" in capsys.readouterr().err
    # The model's first call goes alone (llm/healing.py) and fails after its two tries; the
    # row's other call is cancelled then: before it was sent, or after its first or second try.
    assert 2 <= len(fake_openai.requests) <= 4
    fake_openai.reset()
    fake_openai.always, fake_openai.slow_seconds = "slow", 2.0
    assert evaluate("--base-url", fake_openai.url, "--limit", "1", "--max-retries", "0", "--timeout", "0.2") == 1
    assert "timed out after 0.2s" in capsys.readouterr().err


@pytest.mark.e2e
def test_usage_and_cost_at_the_end_on_stderr(workdir: Path, fake_openai: FakeOpenAI,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    (workdir / "pytest.ini").write_text(prices_ini(), encoding="utf-8")  # egeo reads the project's geo_prices
    assert evaluate("--base-url", fake_openai.url, "--limit", "2") == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["n"] == 2
    lines = err.splitlines()
    start = lines.index("model usage:")
    assert lines[start + 1].startswith("  ranker: calls=4 cache_hits=0") and "cost=$" in lines[start + 1]
    assert lines[start + 3].startswith("cost: $")


@pytest.mark.e2e
def test_progress_on_stderr_keeps_stdout_the_metrics(workdir: Path, fake_openai: FakeOpenAI,
                                                     capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress, "PLAIN_EVERY", 0.0)
    monkeypatch.setattr(progress, "SHOW_AFTER", 0.0)
    fake_openai.latency = 0.35
    assert evaluate("--base-url", fake_openai.url, "--limit", "2", "--concurrency", "1") == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["n"] == 2
    assert any(line.startswith("geo: ") and "rows done" in line for line in err.splitlines())
    fake_openai.reset()
    assert evaluate("--base-url", fake_openai.url, "--limit", "2", "--progress", "off") == 0
    assert "rows done" not in capsys.readouterr().err


@pytest.mark.e2e
def test_missing_key_names_egeo_flags(workdir: Path, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("OPENAI_API_KEY")
    assert evaluate() == 2
    err = capsys.readouterr().err
    assert "--base-url" in err and "--mock" in err and "--geo-" not in err
