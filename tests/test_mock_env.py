"""GEO_EVAL_MOCK takes yes or no: any other value is refused before a call, since read
as "no" it would turn a run the user meant to be offline into a real, paid one."""

from __future__ import annotations

from pathlib import Path

import pytest
from fake_openai import FakeOpenAI

from conftest import GeoProject, egeo_workdir
from pytest_geo.cli import main

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("value", ["y", "maybe", "2"])
def test_an_unknown_mock_value_is_a_usage_error_before_any_call(served_project: GeoProject,
                                                                 monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("GEO_EVAL_MOCK", value)
    result = served_project.run(str(served_project.dataset(2)))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: GEO_EVAL_MOCK='{value}' is neither yes (1, on, true, yes) "
                                 "nor no (0, false, no, off, or unset)"])
    assert served_project.server.requests == []


def test_egeo_refuses_an_unknown_mock_value(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            fake_openai: FakeOpenAI, capsys: pytest.CaptureFixture[str]) -> None:
    egeo_workdir(tmp_path, monkeypatch, rows=2)
    monkeypatch.setenv("GEO_EVAL_MOCK", "maybe")
    assert main(["evaluate", "--dataset", "rows.jsonl", "--base-url", fake_openai.url]) == 2
    assert "egeo: error: GEO_EVAL_MOCK='maybe' is neither yes" in capsys.readouterr().err
    assert fake_openai.requests == []


@pytest.mark.parametrize(("value", "mock"), [("1", True), (" Yes ", True), ("off", False), ("", False), ("0", False)])
def test_known_mock_values_still_work(served_project: GeoProject, monkeypatch: pytest.MonkeyPatch,
                                      value: str, mock: bool) -> None:
    monkeypatch.setenv("GEO_EVAL_MOCK", value)
    result = served_project.run(str(served_project.dataset(1)))
    result.assert_outcomes(passed=1)
    assert bool(served_project.server.requests) is not mock
