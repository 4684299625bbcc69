"""Cache and report paths under attack (issue 38): a sparse file planted as a cache
segment, a linked `answers/` directory, two runs writing one report path, `--apply` over
a linked prompt, and optimize's output paths checked before any model call."""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import threading
from pathlib import Path

import pytest
from test_llm_cache import Counting, request

from conftest import GeoProject
from pytest_geo.data.record import suite_record, where
from pytest_geo.llm.base import ChatResponse
from pytest_geo.llm.cache import CachedClient, ResponseCache, cache_key
from pytest_geo.report.output import write_report_files
from pytest_geo.report.results import Results
from pytest_geo.report.transcripts import TranscriptSpool

ENTRY = {"model": "m", "text": "answer", "prompt_tokens": 3, "completion_tokens": 2}


def entry_line(key: str) -> str:
    return json.dumps({"key": key, **ENTRY}, separators=(",", ":")) + "\n"


# --- the answer cache ------------------------------------------------------------------------


@pytest.mark.unit
def test_a_sparse_20_gb_segment_is_read_only_to_its_bound_said_once_and_never_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
    answers = tmp_path / "answers"
    answers.mkdir()
    with (answers / "0.jsonl").open("wb") as planted:
        planted.truncate(20 << 30)  # 20 GB of zeros that cost no disk
    key = cache_key("http://a/v1", request())
    (answers / "1.jsonl").write_text(entry_line(key))
    read: list[int] = []
    real_pread = os.pread

    def counting_pread(fd: int, length: int, offset: int) -> bytes:
        data = real_pread(fd, length, offset)
        read.append(len(data))
        if sum(read) > 1 << 30:  # today's code reads all 20 GB: fail at the first GiB, not in a minute
            raise AssertionError("read more than 1 GiB of the cache")
        return data

    monkeypatch.setattr(os, "pread", counting_pread)
    inner = Counting()
    client = CachedClient(inner, tmp_path, "http://a/v1")
    assert asyncio.run(client.complete(request())) == ChatResponse("answer", 3, 2, cached=True)
    assert asyncio.run(client.complete(request(model="other"))).text == "answer 1"  # a miss: asked, written
    asyncio.run(client.aclose())
    assert inner.calls == 1
    assert 67_108_864 <= sum(read) < 67_108_864 + 1000  # 64 MiB of the planted file, and the real lines
    assert (answers / "0.jsonl").stat().st_size == 20 << 30  # never appended to
    assert len((answers / "1.jsonl").read_text().splitlines()) == 2  # the new answer went to the next one
    err = capfd.readouterr().err
    assert err.count("pytest-geo: warning:") == 1
    assert (f"pytest-geo: warning: the answer cache's segment {answers / '0.jsonl'} holds 21,474,836,480 bytes, "
            "more than a writer puts in one (67,108,864): only its first 67,108,864 are read, and it is never "
            "written to; remove it if you did not put it there\n") in err


@pytest.mark.unit
def test_a_writer_moves_to_the_next_segment_before_its_own_passes_the_bound(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
    import pytest_geo.llm.cache as cache_module

    monkeypatch.setattr(cache_module, "MAX_SEGMENT_BYTES", 1000)
    cache = ResponseCache(tmp_path)
    for n in range(10):
        cache.put(f"{n:064d}", ChatResponse("x" * 100, 1, 1), "m")
    sizes = [p.stat().st_size for p in sorted((tmp_path / "answers").iterdir())]
    assert sizes == [4 * 237, 4 * 237, 2 * 237]  # 237-byte lines: a fifth would pass 1,000
    cache.close()
    assert ResponseCache(tmp_path).keys() == {f"{n:064d}" for n in range(10)}
    assert capfd.readouterr().err == ""  # no segment a writer made is over the bound


@pytest.mark.unit
def test_files_not_named_as_a_writer_names_segments_are_not_read(tmp_path: Path) -> None:
    key = cache_key("http://a/v1", request())
    (tmp_path / "answers").mkdir()
    for name in ("x.jsonl", "1024.jsonl", "-1.jsonl"):
        (tmp_path / "answers" / name).write_text(entry_line(key))
    assert ResponseCache(tmp_path).get(key) is None
    (tmp_path / "answers" / "1023.jsonl").write_text(entry_line(key))
    assert ResponseCache(tmp_path).get(key) == ChatResponse("answer", 3, 2, cached=True)


@pytest.mark.unit
def test_a_linked_answers_directory_is_neither_read_nor_written(
        tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    key = cache_key("http://a/v1", request())
    (elsewhere / "0.jsonl").write_text(entry_line(key))
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "answers").symlink_to(elsewhere)
    inner = Counting()
    client = CachedClient(inner, tmp_path / "cache", "http://a/v1")
    for _ in range(2):
        assert asyncio.run(client.complete(request())).text.startswith("answer ")
    asyncio.run(client.aclose())
    assert inner.calls == 2  # never answered from there
    assert [p.name for p in elsewhere.iterdir()] == ["0.jsonl"]
    assert (elsewhere / "0.jsonl").read_text() == entry_line(key)  # never written through
    err = capfd.readouterr().err
    assert err == (f"pytest-geo: warning: the answer cache's directory {tmp_path / 'cache' / 'answers'} is a "
                   f"symbolic link (to {elsewhere}): answers are neither read from it nor written to it; remove "
                   "the link to use the cache\n")


@pytest.mark.e2e
def test_a_run_over_a_linked_answers_directory_passes_asks_live_and_writes_nothing_there(
        served_project: GeoProject) -> None:
    dataset = str(served_project.dataset(2))
    served_project.run(dataset).assert_outcomes(passed=2)
    cache = served_project.pytester.path / ".pytest_cache" / "d" / "geo"
    elsewhere = served_project.pytester.path / "elsewhere"
    (cache / "answers").rename(elsewhere)
    before = {p.name: p.read_bytes() for p in elsewhere.iterdir()}
    (cache / "answers").symlink_to(elsewhere)
    served_project.server.reset()
    result = served_project.pytester.runpytest_subprocess(*served_project.args(dataset))
    result.assert_outcomes(passed=2)
    assert len(served_project.server.requests) == 6  # every call live: nothing read from there
    assert {p.name: p.read_bytes() for p in elsewhere.iterdir()} == before  # nothing written there
    assert sum("is a symbolic link" in line for line in result.errlines) == 1


# --- egeo optimize: output paths before the work, and --apply over a link ---------------------


@pytest.mark.e2e
@pytest.mark.parametrize("which", ["candidate", "scores"])
def test_optimize_checks_its_output_paths_before_any_model_call(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], which: str) -> None:
    from test_optimize import make_project, run

    project = make_project(tmp_path / "p")
    blocked = project.candidate if which == "candidate" else project.scores
    blocked.mkdir()
    code, client = run(monkeypatch, project, "--iters", "1")
    assert code == 2
    assert client.requests == []  # not one call paid for
    assert capsys.readouterr().err == (f"egeo: error: {blocked}: cannot write the {which} there: it is a directory; "
                                       "nothing was run\n")


@pytest.mark.e2e
def test_a_suite_procedures_outputs_are_checked_before_any_model_call(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from test_procedures import SUITES, Proposing, optimize_suites

    (tmp_path / "headline.txt").write_text("Write a headline for: {{input}}\n")
    (tmp_path / "evals.py").write_text(SUITES)
    (tmp_path / "headline.optimized_scores.json").mkdir()
    client = Proposing()
    assert optimize_suites(monkeypatch, tmp_path, client=client) == 2
    assert client.requests == []
    assert capsys.readouterr().err == (f"egeo: error: {tmp_path / 'headline.optimized_scores.json'}: cannot write "
                                       "the scores there: it is a directory; nothing was run\n")


@pytest.mark.e2e
def test_apply_over_a_linked_prompt_is_refused_before_any_call_and_the_target_kept(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from test_optimize import Improving, make_project, run

    project = make_project(tmp_path / "p")
    shared = tmp_path / "shared_rewriter_user.txt"
    project.working.rename(shared)
    before = shared.read_bytes()
    project.working.symlink_to(shared)
    code, client = run(monkeypatch, project, "--iters", "1", "--apply", client=Improving())
    assert code == 2
    assert client.requests == []
    assert project.working.is_symlink() and shared.read_bytes() == before
    assert capsys.readouterr().err == (
        f"egeo: error: {project.working}: --apply would replace this symbolic link (to {shared}); it never writes "
        f"through one: run without --apply and copy {project.candidate} where the link points, or make "
        f"{project.working} a plain file\n")
    code, client = run(monkeypatch, project, "--iters", "1", client=Improving())  # without --apply: a candidate
    assert code == 0 and client.requests
    assert project.working.is_symlink() and shared.read_bytes() == before
    assert project.candidate.read_bytes() != before


@pytest.mark.e2e
def test_apply_leaves_a_prompt_that_became_a_link_during_the_search(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from test_optimize import Improving, make_project, run

    project = make_project(tmp_path / "p")
    shared = tmp_path / "shared_rewriter_user.txt"
    before = project.working.read_bytes()
    shared.write_bytes(before)

    class LinkingMidway(Improving):
        async def complete(self, request):  # type: ignore[no-untyped-def]
            if project.working.exists() and not project.working.is_symlink():
                project.working.unlink()
                project.working.symlink_to(shared)  # same text, now a link
            return await super().complete(request)

    code, _ = run(monkeypatch, project, "--iters", "1", "--apply", client=LinkingMidway())
    assert code == 0
    assert project.working.is_symlink() and shared.read_bytes() == before  # neither replaced nor written through
    assert project.candidate.read_bytes() != before  # a better prompt was found, and not applied
    assert f"egeo: warning: {project.working} changed during the run; not applied" in capsys.readouterr().err


# --- two runs writing one report path ---------------------------------------------------------


def run_results(run: str) -> Results:
    results = Results(transcripts=TranscriptSpool())
    for n in range(2):
        base = where("suite", suite="s", metric="m", split="test", nodeid=f"{run}::row{n}", line=n, threshold=None)
        record = suite_record(base, n, f"input {n}", 1.0, "ok", None)
        record["calls"] = [{"step": "call", "role": "procedure", "model": "m", "messages": [], "answer": run}]
        results.add(record)
    return results


@pytest.mark.unit
def test_two_runs_writing_one_report_path_leave_one_runs_report_and_transcripts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run A is held between its transcripts and its report while run B writes: B must
    wait for A's files to be whole, so the report left names the transcripts of its rows."""
    first, second = run_results("A"), run_results("B")
    a_wrote_transcripts, b_done = threading.Event(), threading.Event()
    real_write_to = TranscriptSpool.write_to

    def write_to(spool: TranscriptSpool, path: Path) -> None:
        real_write_to(spool, path)
        if spool is first.transcripts:
            a_wrote_transcripts.set()
            b_done.wait(2)  # today B writes all its files meanwhile; locked out, it cannot

    monkeypatch.setattr(TranscriptSpool, "write_to", write_to)
    report = str(tmp_path / "r.json")

    def run_b() -> None:
        a_wrote_transcripts.wait(10)
        write_report_files(second, report, str(tmp_path / "r.html"), who="B", flags=("--report", "--html"))
        b_done.set()

    other = threading.Thread(target=run_b)
    other.start()
    write_report_files(first, report, str(tmp_path / "r.html"), who="A", flags=("--report", "--html"))
    other.join(20)
    written = json.loads((tmp_path / "r.json").read_text())
    with gzip.open(tmp_path / "r.transcripts.jsonl.gz", "rt") as lines:
        transcribed = sorted(json.loads(line)["nodeid"] for line in lines)
    assert [row["nodeid"] for row in written["rows"]] == ["B::row0", "B::row1"]  # the run that wrote last
    assert transcribed == ["B::row0", "B::row1"]  # its own transcripts beside it
    assert "B::row0" in (tmp_path / "r.html").read_text() and "A::row0" not in (tmp_path / "r.html").read_text()
