"""Large mock runs compute the rows in a forked helper process: same results, same
usage, and -x, a dead helper and Ctrl-C still end the run cleanly with its report.

The plugin runs are subprocesses (`runpytest_subprocess`): the helper is only forked from
a process with no other thread, and an xdist worker running these tests has several."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import PROMPTS, geo_rows
from pytest_geo.data import GeoRow, iter_dataset
from pytest_geo.offload import MIN_ROWS, can_offload
from pytest_geo.session import GeoSession
from pytest_geo.settings import Settings

ROWS = MIN_ROWS + 50

# Prints how many rows went to the helper, and how many objects the garbage collector
# had frozen during the run and after it.
PROBE_CONFTEST = '''
import gc
from pytest_geo.plugin import SESSION

FROZEN = []

def pytest_runtest_call(item):
    FROZEN.append(gc.get_freeze_count())

def pytest_sessionfinish(session):
    geo = session.config.stash.get(SESSION, None)
    offloaded = sum(o.size for o in geo._offloads) if geo else 0
    print(f"\\noffloaded rows: {offloaded}")

def pytest_unconfigure(config):
    print(f"frozen during the run: {min(FROZEN) > 0}, after: {gc.get_freeze_count()}")
'''

# Kills the helper once the first row has reported.
KILLER_CONFTEST = '''
import multiprocessing, os, signal

def pytest_runtest_logreport(report):
    if report.when == "call" and report.nodeid.endswith("::r0"):
        for child in multiprocessing.active_children():
            os.kill(child.pid, signal.SIGKILL)
            child.join()
'''


def write_rows(path: Path, n: int, broken_line: int | None = None) -> Path:
    lines = [json.dumps(r) for r in geo_rows(n)]
    if broken_line is not None:
        lines[broken_line - 1] = '{"query": "truncated'
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def comparable(record: dict) -> dict:
    keep = ("query_id", "target_id", "rank_before", "rank_after", "rank_improvement", "rewritten_description",
            "score", "feedback", "error", "fact_violations")
    return {k: record.get(k) for k in keep}


@pytest.fixture
def project(geo_project: pytest.Pytester) -> pytest.Pytester:
    geo_project.makeconftest(PROBE_CONFTEST)
    return geo_project


def test_offload_only_where_forking_is_safe_and_worth_it() -> None:
    mock = Settings(mock=True)
    assert can_offload(mock, custom_client=False, rows=MIN_ROWS) == sys.platform.startswith("linux")
    assert not can_offload(mock, custom_client=False, rows=MIN_ROWS - 1)
    assert not can_offload(Settings(mock=False), custom_client=False, rows=MIN_ROWS)
    assert not can_offload(mock, custom_client=True, rows=MIN_ROWS)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the helper is forked on Linux only")
def test_helper_gives_the_in_process_results_and_usage(project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    dataset = write_rows(project.path / "rows.jsonl", ROWS)
    result = project.runpytest_subprocess(str(dataset), "--geo-mock", "--geo-report", "rep.json", "-s")
    result.assert_outcomes(passed=ROWS)
    result.stdout.fnmatch_lines([f"offloaded rows: {ROWS}", "frozen during the run: True, after: 0"])
    report = json.loads((project.path / "rep.json").read_text(encoding="utf-8"))

    # The same rows through the in-process runner.
    monkeypatch.setattr("pytest_geo.session.can_offload", lambda *args: False)
    settings = Settings(mock=True, prompts_dir=PROMPTS)
    rows = [r for r in iter_dataset(dataset, settings.seed) if isinstance(r, GeoRow)]
    session = GeoSession(settings)
    try:
        expected = json.loads(json.dumps([o.record() for o in session.evaluate(rows)]))
    finally:
        session.close()
    assert session._offloads == []
    assert [comparable(r) for r in report["rows"]] == [comparable(r) for r in expected]
    assert report["usage"] == session.usage_table()
    assert report["usage"]["ranker"]["calls"] == 2 * ROWS


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the helper is forked on Linux only")
def test_helper_runs_repeats(project: pytest.Pytester) -> None:
    dataset = write_rows(project.path / "rows.jsonl", ROWS)
    result = project.runpytest_subprocess(str(dataset), "--geo-mock", "--geo-repeats", "2", "--geo-report", "rep.json", "-s")
    result.assert_outcomes(passed=ROWS)
    result.stdout.fnmatch_lines([f"offloaded rows: {ROWS}"])
    report = json.loads((project.path / "rep.json").read_text(encoding="utf-8"))
    assert all(len(r["repeats"]) == 2 for r in report["rows"])
    assert report["usage"]["rewriter"]["calls"] == 2 * ROWS


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the helper is forked on Linux only")
def test_exitfirst_stops_the_helper_and_writes_the_report(project: pytest.Pytester) -> None:
    dataset = write_rows(project.path / "rows.jsonl", 4 * MIN_ROWS, broken_line=20)
    result = project.runpytest_subprocess(str(dataset), "--geo-mock", "-x", "--geo-report", "rep.json", "-s")
    result.assert_outcomes(passed=19, failed=1)
    result.stdout.fnmatch_lines(["*rows.jsonl:20: invalid JSON*", "*stopping after 1 failures*"])
    report = json.loads((project.path / "rep.json").read_text(encoding="utf-8"))
    assert report["geo"]["overall"]["n"] == 19 and len(report["rows"]) == 19


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the helper is forked on Linux only")
def test_a_dead_helper_fails_the_remaining_rows_not_the_run(project: pytest.Pytester) -> None:
    project.makeconftest(PROBE_CONFTEST + KILLER_CONFTEST)
    dataset = write_rows(project.path / "rows.jsonl", 4 * MIN_ROWS)
    result = project.runpytest_subprocess(str(dataset), "--geo-mock", "--geo-report", "rep.json", "-s")
    outcomes = result.parseoutcomes()
    assert outcomes["passed"] >= 1 and outcomes["failed"] >= 1
    assert outcomes["passed"] + outcomes["failed"] == 4 * MIN_ROWS
    result.stdout.fnmatch_lines(["*error: the mock helper process failed*", "*pytest-geo evaluation*"])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
    report = json.loads((project.path / "rep.json").read_text(encoding="utf-8"))
    assert len(report["rows"]) == 4 * MIN_ROWS


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the helper is forked on Linux only")
def test_ctrl_c_ends_an_offloaded_run_with_a_partial_report(project: pytest.Pytester) -> None:
    dataset = write_rows(project.path / "rows.jsonl", 30000)
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", str(dataset),
               "--geo-mock", "--geo-report", "rep.json"]
    process = subprocess.Popen(command, cwd=project.path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert process.stdout is not None
    seen = ""
    while "rows.jsonl ." not in seen:  # the first row has reported
        seen += process.stdout.read(1)
    time.sleep(0.5)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=30)
    assert process.returncode == pytest.ExitCode.INTERRUPTED, out[-2000:] + err[-2000:]
    # No traceback from our side (the helper ignores SIGINT; the runner stops cleanly). A
    # signal landing inside pytest's own capture switching can print pytest's, rarely.
    assert "KeyboardInterrupt" in out and "pytest_geo" not in err and "concurrent/futures" not in err
    report = json.loads((project.path / "rep.json").read_text(encoding="utf-8"))
    assert 0 < len(report["rows"]) < 30000
