"""A report path that is an input of the run (the dataset, a prompt file, the baseline)
or another output (the other report, the transcripts file, --junitxml) is a usage
error before any call: written at the end, it replaced the dataset or the other
report without a word."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import egeo_workdir
from pytest_geo.cli import main

pytestmark = pytest.mark.plugin


@pytest.mark.parametrize(("args", "message"), [
    (["--geo-report", "data/smoke.jsonl"],
     "ERROR: --geo-report data/smoke.jsonl is the path data/smoke.jsonl, an input of the run: writing it would "
     "replace it"),
    (["--geo-html", "./data/../data/smoke.jsonl"], "ERROR: --geo-html ./data/../data/smoke.jsonl is the path *"),
    (["--geo-report", "x", "--geo-html", "x"],
     "ERROR: --geo-html x is also --geo-report x: one would overwrite the other; name two files"),
    (["--geo-report", "r.json", "--geo-html", "r.transcripts.jsonl.gz"],
     "ERROR: the transcripts file r.transcripts.jsonl.gz of --geo-report r.json is also --geo-html "
     "r.transcripts.jsonl.gz: *"),
    (["--geo-html", "r.html", "--junitxml", "r.transcripts.jsonl.gz"],
     "ERROR: --junitxml r.transcripts.jsonl.gz is also the transcripts file r.transcripts.jsonl.gz of --geo-html "
     "r.html: *"),
    (["--geo-report", "prompts/ranker_user.txt"],
     "ERROR: --geo-report prompts/ranker_user.txt is the prompt file */prompts/ranker_user.txt, an input *"),
    (["--geo-report", "link.json"], "ERROR: --geo-report link.json is the path data/smoke.jsonl, an input *"),
])
def test_an_output_that_is_an_input_or_another_output_is_a_usage_error(counting_client: pytest.Pytester,
                                                                       args: list[str], message: str) -> None:
    os.symlink("data/smoke.jsonl", counting_client.path / "link.json")
    dataset = (counting_client.path / "data" / "smoke.jsonl").read_bytes()
    prompt = (counting_client.path / "prompts" / "ranker_user.txt").read_bytes()
    result = counting_client.runpytest("data/smoke.jsonl", "--geo-mock", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])
    assert not (counting_client.path / "calls.json").exists()
    assert (counting_client.path / "data" / "smoke.jsonl").read_bytes() == dataset
    assert (counting_client.path / "prompts" / "ranker_user.txt").read_bytes() == prompt


def test_the_baseline_is_an_input_too(counting_client: pytest.Pytester) -> None:
    counting_client.runpytest("data/smoke.jsonl", "--geo-mock", "--geo-report", "base.json").assert_outcomes(passed=8)
    result = counting_client.runpytest("data/smoke.jsonl", "--geo-mock", "--geo-baseline", "base.json",
                                       "--geo-report", "base.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --geo-report base.json is --geo-baseline base.json, an input of the run: *"])


def test_distinct_outputs_and_devices_are_fine(counting_client: pytest.Pytester) -> None:
    result = counting_client.runpytest("data/smoke.jsonl", "--geo-mock", "--geo-report", "r.json",
                                       "--geo-html", "/dev/null", "--junitxml", "j.xml")
    result.assert_outcomes(passed=8)
    assert {p.name for p in counting_client.path.iterdir()} >= {"r.json", "r.transcripts.jsonl.gz", "j.xml"}


def test_egeo_refuses_a_report_over_its_dataset_or_the_other_report(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    egeo_workdir(tmp_path, monkeypatch, rows=2)
    dataset = (tmp_path / "rows.jsonl").read_bytes()
    assert main(["evaluate", "--dataset", "rows.jsonl", "--mock", "--report", "rows.jsonl"]) == 2
    assert capsys.readouterr().err.strip() == ("egeo: error: --report rows.jsonl is --dataset rows.jsonl, an input "
                                               "of the run: writing it would replace it")
    assert main(["evaluate", "--dataset", "rows.jsonl", "--mock", "--report", "x", "--html", "x"]) == 2
    assert "egeo: error: --html x is also --report x: one would overwrite the other" in capsys.readouterr().err
    assert (tmp_path / "rows.jsonl").read_bytes() == dataset and not (tmp_path / "x").exists()


def test_egeo_merge_refuses_to_write_over_a_report_it_merges(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    egeo_workdir(tmp_path, monkeypatch, rows=2)
    assert main(["evaluate", "--dataset", "rows.jsonl", "--mock", "--report", "a.json"]) == 0
    before = (tmp_path / "a.json").read_bytes()
    capsys.readouterr()
    assert main(["merge", "a.json", "--report", "a.json"]) == 2
    assert "egeo: error: --report a.json is the report a.json, an input of the run" in capsys.readouterr().err
    assert (tmp_path / "a.json").read_bytes() == before
    assert json.loads(before)["rows"]
