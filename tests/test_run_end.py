"""The end of a run after the engine is one pipeline for both front ends
(report/finish.py, report/terminal.py): the same counts reach the Results, the same
notes are printed, the same reports written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fake_openai import FakeOpenAI

from conftest import GeoProject
from pytest_geo.cli import main
from pytest_geo.report.results import Results
from pytest_geo.report.terminal import run_notes, written_lines

USAGE = {"ranker": {"calls": 4, "cache_hits": 0, "retries": 1, "errors": 0, "prompt_tokens": 1000,
                    "completion_tokens": 20}}
STATS = {"mode": "fixed", "limit": 2, "reached": 2, "rate_limited": 3}


@pytest.mark.unit
def test_run_notes_are_usage_cost_and_concurrency_and_the_mock_has_neither_cost_nor_limits() -> None:
    results = Results(usage={role: dict(counts) for role, counts in USAGE.items()}, concurrency=dict(STATS))
    notes = run_notes(results, mock=False)
    assert notes[0] == "model usage:" and notes[1].startswith("  ranker: calls=4 cache_hits=0 retries=1")
    assert notes[2].startswith("cost: ")
    assert notes[3] == "concurrency: fixed at 2 rows in flight; 429 answers seen: 3"
    assert len(notes) == 4
    mock = run_notes(results, mock=True)
    assert mock == notes[:2]


@pytest.mark.unit
def test_written_lines_leave_out_a_report_whose_write_failed() -> None:
    results = Results()
    results.write_errors.append("egeo: --report: cannot write taken: it is a directory")
    assert written_lines(results, (("--report", "report", "taken"), ("--html", "HTML report", "r.html"),
                                   ("--other", "other", None))) == ["HTML report written to r.html"]


@pytest.mark.e2e
def test_egeo_and_pytest_end_a_run_alike(served_project: GeoProject, fake_openai: FakeOpenAI,
                                         capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                         tmp_path: Path) -> None:
    """The same notes in the same order, and the same report blocks (egeo's report has
    the concurrency the plugin's has)."""
    dataset = served_project.dataset(3)
    result = served_project.run(dataset.name, "--geo-report", "pytest.json", "--geo-concurrency", "2")
    result.assert_outcomes(passed=3)
    pytest_notes = [line.split(":")[0] for line in result.stdout.lines
                    if line.startswith(("model usage:", "cost:", "concurrency:"))]
    monkeypatch.chdir(served_project.pytester.path)
    assert main(["evaluate", "--dataset", dataset.name, "--prompts", "prompts", "--base-url", fake_openai.url,
                 "--concurrency", "2", "--report", "egeo.json", "--no-cache"]) == 0
    err = capsys.readouterr().err.splitlines()
    egeo_notes = [line.split(":")[0] for line in err if line.startswith(("model usage:", "cost:", "concurrency:"))]
    assert pytest_notes == egeo_notes == ["model usage", "cost", "concurrency"]
    reports = [json.loads((served_project.pytester.path / name).read_text()) for name in ("pytest.json", "egeo.json")]
    assert reports[0]["concurrency"] == reports[1]["concurrency"] == {
        **reports[0]["concurrency"], "mode": "fixed", "limit": 2}


@pytest.mark.unit
def test_both_front_ends_plan_a_sequential_comparison_alike() -> None:
    """report/stopping.py plans the rows and their rounds for the plugin and egeo."""
    from pytest_geo.report.stopping import monitor_for, planned_row, rounds
    from pytest_geo.settings import Settings

    row = planned_row("d.jsonl::q1[short]", "d.jsonl[short]", "train", "short", 3)
    assert row == {"nodeid": "d.jsonl::q1[short]", "suite": "d.jsonl[short]", "split": "train",
                   "unit": "d.jsonl::q1", "variant": "short", "candidates": 3}
    plan = [planned_row(f"d.jsonl::q{i}[{v}]", f"d.jsonl[{v}]", "train", v, 3) for i in range(25) for v in ("a", "b")]
    monitor = monitor_for(plan, Settings(variants={"a": Path("a.txt"), "b": Path("b.txt")}, concurrency=4))
    batches = list(rounds(monitor))
    assert [len(batch) for batch in batches] == [20, 20, 10]  # rounds of 10 rows (the least), both variants
    assert sorted(n for batch in batches for n in batch) == sorted(r["nodeid"] for r in plan)
    assert all(batch[0].endswith("[a]") and batch[1] == batch[0][:-3] + "[b]" for batch in batches)
