"""Report paths checked at start (a directory, no write access, under a file) and
reports that fail at the end (a full disk, a path turned into a file): one clean line,
the other report still written, no previous report left standing as this run's."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from conftest import copy_prompts, geo_rows, no_traceback
from pytest_geo import cli

ROW = ('{"query_id": "%s", "query": "kettle", "target_id": "t", "candidates": [{"id": "a", "title": "Steel kettle", '
       '"description": "1.7 l steel kettle."}, {"id": "t", "title": "Travel kettle", "description": "Folding."}]}\n')


@pytest.mark.plugin
@pytest.mark.parametrize("flag", ["--geo-report", "--geo-html"])
def test_a_report_path_that_is_a_directory_is_a_usage_error_at_start(pytester: pytest.Pytester, flag: str) -> None:
    copy_prompts(pytester.path / "prompts")
    (pytester.path / "rows.jsonl").write_text(ROW % "ok1")
    (pytester.path / "out").mkdir()
    result = pytester.runpytest("rows.jsonl", "--geo-mock", flag, "out")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: {flag}: out is a directory; name a file"])


@pytest.mark.plugin
@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root writes anywhere")
def test_a_report_path_without_write_access_is_a_usage_error_at_start(pytester: pytest.Pytester) -> None:
    copy_prompts(pytester.path / "prompts")
    (pytester.path / "rows.jsonl").write_text(ROW % "ok1")
    (pytester.path / "locked").mkdir(mode=0o500)
    result = pytester.runpytest("rows.jsonl", "--geo-mock", "--geo-report", "locked/r.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --geo-report: cannot write locked/r.json: no write access to *locked"])


@pytest.mark.plugin
def test_a_report_path_under_a_file_is_a_usage_error_at_start(pytester: pytest.Pytester) -> None:
    copy_prompts(pytester.path / "prompts")
    (pytester.path / "rows.jsonl").write_text(ROW % "ok1")
    result = pytester.runpytest("rows.jsonl", "--geo-mock", "--geo-html", "rows.jsonl/r.html")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --geo-html: cannot write rows.jsonl/r.html: *rows.jsonl is not a directory"])


WRITE_FAILS_CONFTEST = '''
import shutil
from pathlib import Path

def pytest_sessionstart(session):
    # after the start check passed: the report's directory becomes a file
    shutil.rmtree("out")
    Path("out").write_text("")
'''


@pytest.mark.plugin
def test_a_report_write_failing_at_the_end_keeps_the_summary_and_the_other_report(pytester: pytest.Pytester) -> None:
    copy_prompts(pytester.path / "prompts")
    (pytester.path / "rows.jsonl").write_text(ROW % "ok1" + ROW % "ok2")
    pytester.makeconftest(WRITE_FAILS_CONFTEST)
    (pytester.path / "out").mkdir()
    result = pytester.runpytest("rows.jsonl", "--geo-mock", "--geo-report", "out/r.json", "--geo-html", "r.html")
    result.assert_outcomes(passed=2, failed=1)  # pytest-geo::report, the failed write as a test
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["pytest-geo: --geo-report: cannot write out/r.json: Not a directory",
                                 "HTML report written to r.html", "Evals:", "- rows.jsonl::rank_improvement: *"])
    assert (pytester.path / "r.html").is_file()
    no_traceback(result)


def full_device(path: Path) -> Path:
    """A private /dev/full (every write fails with ENOSPC): a code path that renamed over
    it would replace this node, never the machine's /dev/full."""
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 7))
    except (PermissionError, AttributeError):
        pytest.skip("cannot make a device node here")
    return path


def mock_project(pytester: pytest.Pytester) -> None:
    copy_prompts(pytester.path / "prompts")
    (pytester.path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in geo_rows(2)))


@pytest.mark.plugin
def test_a_report_on_a_full_disk_fails_the_run_in_the_final_line(pytester: pytest.Pytester) -> None:
    mock_project(pytester)
    full = full_device(pytester.path / "full")
    result = pytester.runpytest("rows.jsonl", "--geo-mock", "--geo-report", "full", "--geo-html", "r.html", "-rf")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([
        "FAILED pytest-geo::report - pytest-geo: --geo-report: cannot write full*",
        "pytest-geo: --geo-report: cannot write full: No space left on device",
        "HTML report written to r.html",
    ])
    assert result.outlines[-1].startswith("=") and "1 failed, 2 passed" in result.outlines[-1]
    assert stat.S_ISCHR(full.stat().st_mode)  # written in place: the device node is still there
    assert (pytester.path / "r.html").is_file()
    no_traceback(result)


DISK_FULL_AT_THE_END = '''
import errno
import os
import pytest

@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session):  # reports are written when the loop ends
    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    os.fsync = full  # reports are written durably (fsync before the rename); cache entries are not
'''


@pytest.mark.e2e
def test_a_previous_report_never_stays_as_this_runs(pytester: pytest.Pytester) -> None:
    mock_project(pytester)
    pytester.makeconftest(DISK_FULL_AT_THE_END)
    (pytester.path / "out").mkdir()
    for name in ("out/r.json", "r.html"):
        (pytester.path / name).write_text("the previous run's report")
    result = pytester.runpytest_subprocess("rows.jsonl", "--geo-mock", "--geo-report", "out/r.json",
                                           "--geo-html", "r.html")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([
        "pytest-geo: --geo-report: cannot write out/r.json: No space left on device (the previous report there was "
        "removed)",
        "pytest-geo: --geo-html: cannot write r.html: No space left on device (the previous report there was removed)",
    ])
    assert "1 failed, 2 passed" in result.outlines[-1]
    assert not (pytester.path / "out" / "r.json").exists() and not (pytester.path / "r.html").exists()
    assert sorted(p.name for p in (pytester.path / "out").iterdir()) == []  # no temp file left either


@pytest.mark.e2e
def test_egeo_report_on_a_full_disk_exits_1_and_leaves_the_device(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    copy_prompts(tmp_path / "prompts")
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in geo_rows(2)))
    full = full_device(tmp_path / "full")
    assert cli.main(["evaluate", "--dataset", "rows.jsonl", "--mock", "--prompts", "prompts",
                     "--report", "full"]) == 1
    assert "egeo: --report: cannot write full: No space left on device\n" in capsys.readouterr().err
    assert stat.S_ISCHR(full.stat().st_mode)
