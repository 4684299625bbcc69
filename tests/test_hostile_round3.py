"""Hostile input, round 3 (issue 26): nothing hung, nothing written where it should not
be, nothing spent on a broken run, clean one-line failures."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import pytest

from conftest import GeoProject, copy_prompts, geo_rows, rewrite_cache_entries
from pytest_geo import cli

TRACEBACK_MARKS = ("Traceback (most recent call last)", "raise ", ".py:[0-9]*: in ")


def no_traceback(result: pytest.RunResult) -> None:
    for mark in TRACEBACK_MARKS:
        result.stdout.no_fnmatch_line(f"*{mark}*")
        result.stderr.no_fnmatch_line(f"*{mark}*")


# --- --base-url with a control character ---------------------------------------------------


@pytest.mark.parametrize("character", ["\n", "\r", "\x00", "\t", "\x7f"])
def test_a_base_url_with_a_control_character_is_a_usage_error_naming_the_flag(
        served_project: GeoProject, character: str) -> None:
    url = served_project.server.url + character
    result = served_project.pytester.runpytest(str(served_project.dataset(2)), "--geo-base-url", url,
                                               "-p", "no:xdist")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: the base URL (--geo-base-url, geo_base_url or OPENAI_BASE_URL) holds "
                                 f"a control character ({character!r} at position {len(url) - 1}); remove it"])
    no_traceback(result)
    assert served_project.server.requests == []


def test_egeo_names_its_own_flag_for_a_base_url_with_a_newline(
        served_project: GeoProject, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(served_project.pytester.path)
    dataset = served_project.dataset(2)
    code = cli.main(["evaluate", "--dataset", str(dataset), "--base-url", "http://127.0.0.1:9/v1\nHost: evil"])
    assert code == 2
    assert capsys.readouterr().err == ("egeo: error: the base URL (--base-url or OPENAI_BASE_URL) holds a control "
                                       "character ('\\n' at position 21); remove it\n")


# --- a metric that calls sys.exit ----------------------------------------------------------------

EXITING_METRIC = '''
import sys
import pytest_geo
s_eval = pytest_geo.suite("s", data={"rows": [(1, 1), (3, 1), (2, 2)]})

@s_eval.metric
def exits(rows, expected):
    if rows == 3:
        sys.exit(3)
    if rows == 2:
        sys.exit()
    return True
'''


def test_a_metric_calling_sys_exit_scores_zero_with_an_error_line(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_s=EXITING_METRIC)
    result = pytester.runpytest("-p", "no:cacheprovider", "--geo-report", "r.json")
    result.assert_outcomes(passed=1, failed=2)
    # the metric's own traceback, as pytest shows a test calling sys.exit (issue 37); none of the plugin's
    result.stdout.fnmatch_lines([">           sys.exit(3)", "E           SystemExit: 3",
                                 ">           sys.exit()", "E           SystemExit"])
    result.stdout.no_fnmatch_line("*pytest_geo/suites/*")
    report = json.loads((pytester.path / "r.json").read_text())
    assert [(r["score"], r["feedback"]) for r in report["rows"]][1:] == [
        (0.0, "error: SystemExit: 3"), (0.0, "error: SystemExit")]


def test_a_metric_raising_keyboard_interrupt_still_stops_the_run(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_s='''
import pytest_geo
s_eval = pytest_geo.suite("s", data={"rows": [(1, 1), (2, 1), (3, 1)]})

@s_eval.metric
def stops(rows, expected):
    if rows == 2:
        raise KeyboardInterrupt
    return True
''')
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*KeyboardInterrupt*"])
    result.assert_outcomes(passed=1)


# --- egeo init and symlinks ---------------------------------------------------------------------


def test_egeo_init_never_writes_through_a_symlink(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    project, outside = tmp_path / "project", tmp_path / "outside"
    project.mkdir()
    outside.mkdir()
    (project / "pytest.ini").symlink_to(outside / "pytest.ini")  # dangling
    (project / "prompts").symlink_to(outside / "prompts")  # dangling
    (project / "eval").symlink_to(outside)  # a real directory elsewhere
    assert cli.main(["init", str(project)]) == 0
    assert list(outside.iterdir()) == []
    out = capsys.readouterr().out
    link = "(a symbolic link: egeo init never writes through one)"
    assert out.splitlines()[:3] == [f"skipped {project / 'prompts'} {link}", f"skipped {project / 'eval'} {link}",
                                    f"skipped {project / 'pytest.ini'} {link}"]
    assert "add these lines to your pytest configuration:\n[pytest]\ntestpaths = eval\npythonpath = .\ngeo_prompts = prompts\n" in out
    assert "Traceback" not in out
    assert [p.name for p in project.iterdir() if not p.is_symlink()] == []


# --- a planted cache entry ---------------------------------------------------------------------------


def test_planted_cache_entries_are_misses_counted_in_the_usage(served_project: GeoProject) -> None:
    dataset = str(served_project.dataset(2))
    served_project.run(dataset).assert_outcomes(passed=2)
    # 10**400 tokens: json reads it, float() of it fails
    planted = rewrite_cache_entries(served_project.pytester.path / ".pytest_cache" / "d" / "geo",
                                    lambda entry: {**entry, "prompt_tokens": 10**400})
    assert planted == 6
    served_project.server.reset()
    result = served_project.run(dataset, "--geo-report", "r.json")
    result.assert_outcomes(passed=2)
    assert len(served_project.server.requests) == 6  # every entry was a miss
    result.stdout.fnmatch_lines(["  ranker: calls=4 cache_hits=0 retries=0 errors=0 * cache_rejected=4 *",
                                 "  rewriter: calls=2 cache_hits=0 retries=0 errors=0 * cache_rejected=2 *"])
    usage = json.loads((served_project.pytester.path / "r.json").read_text())["usage"]
    assert (usage["ranker"]["cache_rejected"], usage["rewriter"]["cache_rejected"]) == (4, 2)
    served_project.server.reset()
    served_project.run(dataset).assert_outcomes(passed=2)  # the live answers replaced them
    assert served_project.server.requests == []


# --- endless suite data ------------------------------------------------------------------------------

ENDLESS = '''
import itertools
import pytest_geo

def forever():
    for n in itertools.count():
        yield (n, n)

def growing():
    for n in itertools.count():
        yield ("x" * (1 << 20), n)

endless_eval = pytest_geo.suite("endless", data={"rows": forever})
huge_eval = pytest_geo.suite("huge", data={"rows": growing()})

@endless_eval.metric
def same(rows, expected):
    return rows == expected

@huge_eval.metric
def fine(rows, expected):
    return True

def test_plain():
    pass
'''


@pytest.mark.parametrize("args", [(), ("--co",), ("-k", "plain")])
def test_endless_suite_data_is_a_collection_error_naming_the_suite_and_the_bound(
        pytester: pytest.Pytester, args: tuple[str, ...]) -> None:
    pytester.makepyfile(test_endless=ENDLESS)
    started = time.monotonic()
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", *args, timeout=60)
    assert time.monotonic() - started < 30
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines([
        "*suite 'endless': dataset 'rows': more than 100,000 rows, the bound for data from Python "
        "code (a never-ending generator?)*",
    ])
    result.stdout.fnmatch_lines([
        "*suite 'huge': dataset 'rows': rows larger than 256 MiB in memory, the bound for data from "
        "Python code*",
    ])
    no_traceback(result)


# --- no model call before collection has succeeded -------------------------------------------------


@pytest.mark.parametrize("workers", ["0", "2"])
def test_a_collection_error_makes_no_model_call(served_project: GeoProject, workers: str) -> None:
    dataset = str(served_project.dataset(3))
    served_project.pytester.makepyfile(test_broken="import no_such_module_anywhere\n")
    result = served_project.pytester.runpytest(dataset, "test_broken.py", "--geo-base-url", served_project.server.url,
                                               "-n", workers, "-rs")
    assert served_project.server.requests == []
    assert result.ret in (pytest.ExitCode.INTERRUPTED, pytest.ExitCode.TESTS_FAILED)
    result.stdout.fnmatch_lines(["*ModuleNotFoundError: No module named 'no_such_module_anywhere'*"])
    if workers == "0":  # pytest stops before running anything
        result.stdout.fnmatch_lines(["*Interrupted: 1 error during collection*"])
    else:  # xdist runs the other items: the rows skip, saying why
        result.assert_outcomes(skipped=3, errors=1)
        result.stdout.fnmatch_lines(["*not run: 1 error during collection (--continue-on-collection-errors runs "
                                     "the rows)*"])


def test_continue_on_collection_errors_still_runs_the_rows(served_project: GeoProject) -> None:
    dataset = str(served_project.dataset(2))
    served_project.pytester.makepyfile(test_broken="import no_such_module_anywhere\n")
    result = served_project.run(dataset, "test_broken.py", "--continue-on-collection-errors")
    result.assert_outcomes(passed=2, errors=1)
    assert len(served_project.server.requests) == 6


# --- a report that cannot be written -------------------------------------------------------------


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


@pytest.mark.parametrize("workers", ["0", "2"])
def test_a_run_whose_collection_failed_prints_no_concurrency_line(served_project: GeoProject, workers: str) -> None:
    pytest.importorskip("xdist")
    dataset = str(served_project.dataset(3))
    served_project.pytester.makepyfile(test_broken="import no_such_module_anywhere\n")
    result = served_project.pytester.runpytest(dataset, "test_broken.py", "--geo-base-url", served_project.server.url,
                                               "-n", workers, "--geo-report", "r.json")
    assert served_project.server.requests == []
    result.stdout.no_fnmatch_line("concurrency: *")
    assert "concurrency" not in json.loads((served_project.pytester.path / "r.json").read_text(encoding="utf-8"))


def test_egeo_without_a_row_to_run_prints_no_concurrency_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-dummy-0000")
    (tmp_path / "rows.jsonl").write_text('{"query": "red kettle"\n', encoding="utf-8")  # cut short
    code = cli.main(["evaluate", "--dataset", "rows.jsonl", "--base-url", "http://127.0.0.1:9/v1", "--no-cache"])
    err = capsys.readouterr().err
    assert code == 1 and "rows.jsonl:1: " in err
    assert "concurrency:" not in err
