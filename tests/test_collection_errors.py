"""A collection error stops the run before any model call (the rows skip under xdist,
saying why) unless --continue-on-collection-errors; a run that ran no row prints no
concurrency line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import ONE_PROCESS_AND_TWO_WORKERS, GeoProject
from pytest_geo import cli


@pytest.mark.parametrize("workers", ONE_PROCESS_AND_TWO_WORKERS)
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


@pytest.mark.plugin
def test_continue_on_collection_errors_still_runs_the_rows(served_project: GeoProject) -> None:
    dataset = str(served_project.dataset(2))
    served_project.pytester.makepyfile(test_broken="import no_such_module_anywhere\n")
    result = served_project.run(dataset, "test_broken.py", "--continue-on-collection-errors")
    result.assert_outcomes(passed=2, errors=1)
    assert len(served_project.server.requests) == 6


@pytest.mark.parametrize("workers", ONE_PROCESS_AND_TWO_WORKERS)
def test_a_run_whose_collection_failed_prints_no_concurrency_line(served_project: GeoProject, workers: str) -> None:
    pytest.importorskip("xdist")
    dataset = str(served_project.dataset(3))
    served_project.pytester.makepyfile(test_broken="import no_such_module_anywhere\n")
    result = served_project.pytester.runpytest(dataset, "test_broken.py", "--geo-base-url", served_project.server.url,
                                               "-n", workers, "--geo-report", "r.json")
    assert served_project.server.requests == []
    result.stdout.no_fnmatch_line("concurrency: *")
    assert "concurrency" not in json.loads((served_project.pytester.path / "r.json").read_text(encoding="utf-8"))


@pytest.mark.e2e
def test_egeo_without_a_row_to_run_prints_no_concurrency_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-dummy-0000")
    (tmp_path / "rows.jsonl").write_text('{"query": "red kettle"\n', encoding="utf-8")  # cut short
    code = cli.main(["evaluate", "--dataset", "rows.jsonl", "--base-url", "http://127.0.0.1:9/v1", "--no-cache"])
    err = capsys.readouterr().err
    assert code == 1 and "rows.jsonl:1: " in err
    assert "concurrency:" not in err
