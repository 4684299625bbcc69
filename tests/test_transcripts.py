"""Each GEO row keeps its transcript: every model call's rendered messages and raw answer,
in experiment order, from the engine through xdist into the JSON report; never the key."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from fake_openai import completion
from test_reporting import read, transcript_lines, validate, with_calls

from conftest import DUMMY_KEY, ONE_PROCESS_AND_TWO_WORKERS, PROMPTS, GeoProject, egeo_workdir
from pytest_geo.cli import main
from pytest_geo.templates import render

STEPS = ["rank_before", "rewrite", "rank_after"]


def prompt(project: Path, name: str) -> str:
    return (project / "prompts" / name).read_text(encoding="utf-8")


@pytest.mark.plugin
def test_calls_are_the_rendered_prompts_and_raw_answers_also_from_the_cache(served_project: GeoProject) -> None:
    dataset = str(served_project.dataset(2))
    bad: list[str] = []

    def first_ranking_of_r0(body: dict[str, Any]) -> str | None:
        """Row r0's first ranking is unusable (and so re-asked), whatever order calls arrive in."""
        text = json.dumps(body)
        if not bad and "ordered_ids" in text and "red kettle number 0" in text:
            bad.append(text)
            return "bad_ranking"
        return None

    served_project.server.fault_for = first_ranking_of_r0
    served_project.run(dataset, "--geo-concurrency", "1", "--geo-report", "first.json").assert_outcomes(passed=2)
    validate(read(served_project.pytester, "first.json"))
    first = with_calls(served_project.pytester.path / "first.json")
    rows = first["rows"]
    sent = [r["body"] for r in served_project.server.requests]
    calls = [c for r in rows for c in r["calls"]]
    assert len(calls) == len(sent) == 7  # 3 per row, one re-ask
    for row in rows:
        assert row["query"].startswith("red kettle number") and row["original_description"] == "steel, 1.7 litres"
        steps = [c["step"] for c in row["calls"] if c["attempt"] == 0]
        assert steps == STEPS
        for call in row["calls"]:
            assert call["cached"] is False and "error" not in call
            # the answer is what the server said to exactly these messages
            body = next(body for body in sent if call["messages"] == body["messages"])
            fault = "bad_ranking" if call["attempt"] == 0 and row is rows[0] and call["step"] == "rank_before" else None
            assert call["answer"] == completion(body, fault)["choices"][0]["message"]["content"]
        rewrite = next(c for c in row["calls"] if c["step"] == "rewrite")
        assert rewrite["role"] == "rewriter" and rewrite["model"]
        assert rewrite["messages"][0] == {"role": "system",
                                          "content": prompt(served_project.pytester.path, "rewriter_system.txt")}
        assert "{{" not in rewrite["messages"][1]["content"] and "steel, 1.7 litres" in rewrite["messages"][1]["content"]
        after = next(c for c in row["calls"] if c["step"] == "rank_after")
        assert row["rewritten_description"] in after["messages"][1]["content"]
    reasked = [c for c in rows[0]["calls"] if c["step"] == "rank_before"]
    assert [c["attempt"] for c in reasked] == [0, 1]
    assert reasked[1]["messages"][2] == {"role": "assistant", "content": reasked[0]["answer"]}
    assert "could not be used" in reasked[1]["messages"][3]["content"]

    served_project.run(dataset, "--geo-report", "second.json").assert_outcomes(passed=2)
    second = with_calls(served_project.pytester.path / "second.json")
    again = [c for r in second["rows"] for c in r["calls"]]
    assert len(again) == 7 and all(c["cached"] for c in again)  # the bad answer too: the re-ask is replayed
    good = {json.dumps(c["messages"]): c["answer"] for c in calls}
    assert all(good[json.dumps(c["messages"])] == c["answer"] for c in again)
    text = (served_project.pytester.path / "first.json").read_text() + json.dumps(second)
    assert DUMMY_KEY not in text + json.dumps(transcript_lines(served_project.pytester.path / "first.json"))


@pytest.mark.plugin
def test_a_failed_call_is_kept_with_its_error_and_no_key(served_project: GeoProject) -> None:
    served_project.server.always = "500"  # not a fail-fast error (a 401 would stop the run before any row)
    result = served_project.run(str(served_project.dataset(1)), "--geo-report", "r.json", "--geo-max-retries", "0")
    result.assert_outcomes(failed=1)
    validate(read(served_project.pytester, "r.json"))
    report = with_calls(served_project.pytester.path / "r.json")
    (row,) = report["rows"]
    failed = [c for c in row["calls"] if "error" in c]
    assert failed and all(c["answer"] is None for c in failed)
    assert row["error"] in {c["error"] for c in failed}
    assert DUMMY_KEY not in (served_project.pytester.path / "r.json").read_text()
    assert DUMMY_KEY not in json.dumps(transcript_lines(served_project.pytester.path / "r.json"))


@pytest.mark.parametrize("workers", ONE_PROCESS_AND_TWO_WORKERS)
def test_calls_reach_the_report_under_xdist_and_per_repeat(geo_project: pytest.Pytester, workers: str) -> None:
    result = geo_project.runpytest("data/smoke.jsonl", "--geo-mock", "-n", workers, "--geo-repeats", "2",
                                   "--geo-report", "r.json")
    result.assert_outcomes(passed=8)
    validate(read(geo_project, "r.json"))
    report: dict[str, Any] = with_calls(geo_project.path / "r.json")
    system = render(prompt(geo_project.path, "ranker_system.txt"), {})
    for row in report["rows"]:
        assert "calls" not in row  # with repeats, each repeat keeps its own
        for repeat in row["repeats"]:
            assert [c["step"] for c in repeat["calls"]] == STEPS
            ranking = repeat["calls"][0]
            assert ranking["messages"][0]["content"].split("{{")[0] == system.split("{{")[0]
            # the ranker saw this repeat's order
            ids = [json.loads(line)["id"] for line in ranking["messages"][1]["content"].splitlines()
                   if line.startswith('{"id"')]
            assert not ids or ids == repeat["order"]


def assert_report_and_transcripts_file(report_path: Path, rows: int) -> None:
    """The report keeps every row's results and how many calls it made, no call itself,
    and names the transcripts file beside it: one gzip JSON line per row, read with the
    stdlib alone, holding exactly that many calls."""
    report = json.loads(report_path.read_text(encoding="utf-8"))
    assert report["format_version"] == 2
    assert report["transcripts"] == {"path": report_path.stem + ".transcripts.jsonl.gz", "rows": rows}
    assert len(report["rows"]) == rows
    for row in report["rows"]:
        assert "calls" not in row and row["n_calls"] == 3
        assert {"nodeid", "score", "rank_before", "rank_after", "feedback", "error", "query",
                "original_description", "rewritten_description"} <= set(row)
    with gzip.open(report_path.parent / report["transcripts"]["path"], "rt", encoding="utf-8") as handle:
        lines = [json.loads(text) for text in handle]
    assert sorted(line["nodeid"] for line in lines) == sorted(row["nodeid"] for row in report["rows"])
    assert all([c["step"] for c in line["calls"]] == STEPS for line in lines)


@pytest.mark.plugin
def test_the_report_names_its_transcripts_file_and_holds_no_call(geo_project: pytest.Pytester) -> None:
    result = geo_project.runpytest("data/smoke.jsonl", "--geo-mock", "--geo-report", "out/r.json",
                                   "--geo-html", "out/page.html")
    result.assert_outcomes(passed=8)
    result.stdout.fnmatch_lines(["report written to out/r.json", "HTML report written to out/page.html",
                                 "transcripts written to out/r.transcripts.jsonl.gz"])
    assert_report_and_transcripts_file(geo_project.path / "out" / "r.json", 8)
    assert sorted(p.name for p in (geo_project.path / "out").iterdir()) == ["page.html", "r.json",
                                                                           "r.transcripts.jsonl.gz"]
    page = (geo_project.path / "out" / "page.html").read_text(encoding="utf-8")
    assert '"transcripts":{"file":"r.transcripts.jsonl.gz","embedded":8,"rows":8,"first":200,"errors":200}' in page


@pytest.mark.plugin
def test_the_page_alone_gets_the_transcripts_file_and_no_report_gets_none(geo_project: pytest.Pytester) -> None:
    result = geo_project.runpytest("data/smoke.jsonl", "--geo-mock", "--geo-html", "page.html")
    result.assert_outcomes(passed=8)
    result.stdout.fnmatch_lines(["transcripts written to page.transcripts.jsonl.gz"])
    with gzip.open(geo_project.path / "page.transcripts.jsonl.gz", "rt", encoding="utf-8") as handle:
        assert len(handle.readlines()) == 8
    (geo_project.path / "page.transcripts.jsonl.gz").unlink()
    result = geo_project.runpytest("data/smoke.jsonl", "--geo-mock")
    result.assert_outcomes(passed=8)
    result.stdout.no_fnmatch_line("*transcripts written*")
    assert list(geo_project.path.rglob("*.gz")) == []


@pytest.mark.e2e
def test_egeo_writes_the_same_report_and_transcripts_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    egeo_workdir(tmp_path, monkeypatch, 5)
    code = main(["evaluate", "--dataset", "rows.jsonl", "--prompts", str(PROMPTS), "--mock", "--no-cache",
                 "--report", "e.json", "--html", "e.html"])
    assert code == 0
    assert capsys.readouterr().err.splitlines()[-3:] == [
        "report written to e.json", "HTML report written to e.html", "transcripts written to e.transcripts.jsonl.gz"]
    assert_report_and_transcripts_file(tmp_path / "e.json", 5)
