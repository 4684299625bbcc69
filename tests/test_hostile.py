"""Hostile inputs (issue 14): no wrong data, bounded time and memory, no key in any file,
clean failures. The static inputs live in tests/corpus/; inputs that are large or special
(FIFOs, /dev/zero links, alias bombs) are made here, at test time."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_reporting import transcript_lines

from conftest import cache_entries, copy_prompts

CORPUS = Path(__file__).resolve().parent / "corpus"
TRACEBACK_MARKS = ("Traceback (most recent call last)", "raise ", ".py:[0-9]*: in ")


def no_traceback(result: pytest.RunResult) -> None:
    for mark in TRACEBACK_MARKS:
        result.stdout.no_fnmatch_line(f"*{mark}*")
        result.stderr.no_fnmatch_line(f"*{mark}*")


def without_timings(report: dict[str, Any]) -> dict[str, Any]:
    report = dict(report)
    report["metadata"] = {k: v for k, v in report["metadata"].items() if k not in ("started_at", "duration_s")}
    report["rows"] = sorted(report["rows"], key=lambda r: r["nodeid"])
    report.pop("concurrency")  # the workers' limits add up: it differs by design (test_xdist.py)
    report["transcripts"] = {k: v for k, v in report["transcripts"].items() if k != "path"}  # each names its own
    return report


# --- wrong data -------------------------------------------------------------------------


def test_colliding_names_keep_each_row_its_own_data_with_and_without_workers(pytester: pytest.Pytester) -> None:
    """Query ids `q1`, `q1`, `q1@line2`, a row without an id on line 4 and `line4`: each
    row keeps its own target and ranks, and -n 2 reports what one process reports."""
    pytest.importorskip("xdist")
    copy_prompts(pytester.path / "prompts")
    shutil.copy(CORPUS / "datasets" / "colliding_names.jsonl", pytester.path / "rows.jsonl")
    source = [json.loads(line) for line in (pytester.path / "rows.jsonl").read_text().splitlines()]
    reports = []
    for workers in ("0", "2"):
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-n", workers, "rows.jsonl", "--geo-mock",
                                               "--geo-report", f"r{workers}.json")
        result.assert_outcomes(passed=len(source))
        reports.append(json.loads((pytester.path / f"r{workers}.json").read_text()))
    assert without_timings(reports[0]) == without_timings(reports[1])
    rows = reports[0]["rows"]
    assert len({r["nodeid"] for r in rows}) == len(source)
    for workers in ("0", "2"):  # one transcript per row, under its own node id
        lines = transcript_lines(pytester.path / f"r{workers}.json")
        assert sorted(t["nodeid"] for t in lines) == sorted(r["nodeid"] for r in rows)
    for row in rows:
        line = source[row["line"] - 1]
        assert row["target_id"] == line["target_id"]
        # The descriptions are alike and the target is listed last: the mock (the E-GEO
        # harness's) counts the ranker prompt's closing line into the last description.
        assert (row["rank_before"], row["rank_after"]) == (1, 1)


def test_a_baseline_repeating_a_node_id_pairs_none_of_those_rows() -> None:
    from pytest_geo.report.baseline import compare

    suite = {"suite": "s", "metric": "rank_improvement", "split": "train", "score": 1.0}
    rows = [{"suite": "s", "split": "train", "nodeid": n, "score": 1.0} for n in ("f::a", "f::b")]
    baseline = {"suites": [suite], "rows": [{"suite": "s", "nodeid": "f::a", "score": 0.0},
                                            {"suite": "s", "nodeid": "f::a", "score": 2.0},
                                            {"suite": "s", "nodeid": "f::b", "score": 0.0}]}
    (comparison,) = compare([suite], rows, baseline)
    assert comparison.paired is not None and comparison.paired.n == 1


def test_a_call_failing_with_any_exception_counts_as_an_error() -> None:
    import asyncio

    from pytest_geo.llm.base import ChatRequest
    from pytest_geo.llm.usage import UsageClient

    class Broken:
        async def complete(self, request: ChatRequest) -> Any:
            raise RuntimeError("the SDK failed in its own way")

        async def aclose(self) -> None:
            pass

    usage = UsageClient(Broken())
    request = ChatRequest(role="ranker", model="m", messages=({"role": "user", "content": "x"},))
    with pytest.raises(RuntimeError):
        asyncio.run(usage.complete(request))
    assert usage.usage["ranker"]["errors"] == 1


# --- bounded time and memory: input read only from regular files -------------------------

ROW = ('{"query_id": "%s", "query": "kettle", "target_id": "t", "candidates": [{"id": "a", "title": "Steel kettle", '
       '"description": "1.7 l steel kettle."}, {"id": "t", "title": "Travel kettle", "description": "Folding."}]}\n')
HANG_GUARD = 120  # seconds; these runs take a few, a blocked read would take forever


def limited(code: str, memory: int = 1 << 30) -> str:
    """`code` run after capping the address space (RLIMIT_AS), so reading without end
    fails fast with MemoryError instead of taking the machine's memory."""
    return f"import resource\nresource.setrlimit(resource.RLIMIT_AS, ({memory}, {memory}))\n{code}"


def run_limited(pytester: pytest.Pytester, code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", limited(code)], cwd=pytester.path, capture_output=True, text=True,
                          timeout=HANG_GUARD)


needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are POSIX")


@needs_fifo
def test_a_fifo_named_as_dataset_is_a_usage_error(pytester: pytest.Pytester) -> None:
    os.mkfifo(pytester.path / "rows.jsonl")
    result = pytester.runpytest_subprocess("--geo-dataset", "rows.jsonl", "--geo-mock", timeout=HANG_GUARD)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --geo-dataset: dataset not a regular file: rows.jsonl"])


def test_egeo_on_dev_zero_stops_with_one_line_in_bounded_memory(pytester: pytest.Pytester) -> None:
    copy_prompts(pytester.path / "prompts")
    (pytester.path / "zero.jsonl").symlink_to("/dev/zero")
    done = run_limited(pytester, "import sys\nfrom pytest_geo.cli import main\n"
                                 "sys.exit(main(['evaluate', '--dataset', 'zero.jsonl', '--mock']))")
    assert done.returncode == 2, done.stderr
    assert done.stderr == "egeo: error: zero.jsonl: cannot read dataset: not a regular file (a character device)\n"


@needs_fifo
@pytest.mark.parametrize("special", ["fifo", "zero"])
def test_suite_data_that_is_not_a_regular_file_is_a_collection_error(pytester: pytest.Pytester,
                                                                     special: str) -> None:
    if special == "fifo":
        os.mkfifo(pytester.path / "rows.jsonl")
    else:
        (pytester.path / "rows.jsonl").symlink_to("/dev/zero")
    pytester.makefile(".geo.yaml", square="suite: square\nprocedure: builtins:str\ndata:\n  rows: rows.jsonl\n"
                                           "metric: {builtin: exact_match, dataset: rows}\n")
    result = pytester.runpytest_subprocess("square.geo.yaml", timeout=HANG_GUARD)
    assert result.ret == pytest.ExitCode.INTERRUPTED  # a collection error
    kind = "a FIFO" if special == "fifo" else "a character device"
    result.stdout.fnmatch_lines([f"*square.geo.yaml: suite 'square': dataset 'rows' failed to load: "
                                 f"*rows.jsonl: cannot read dataset: not a regular file ({kind})"])
    no_traceback(result)


def test_a_line_over_the_cap_is_a_line_problem_and_the_other_rows_run(pytester: pytest.Pytester) -> None:
    from pytest_geo.data.dataset import MAX_LINE_BYTES

    copy_prompts(pytester.path / "prompts")
    with (pytester.path / "rows.jsonl").open("w") as handle:
        handle.write(ROW % "ok1")
        handle.write('{"query": "' + "x" * (MAX_LINE_BYTES + 10) + '"}\n')
        handle.write(ROW % "ok3")
    result = pytester.runpytest("rows.jsonl", "--geo-mock", "-rA")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["rows.jsonl:2: line longer than 16 MiB"])
    assert max(map(len, result.outlines)) < 300


def test_cache_entries_that_are_fifos_links_to_dev_zero_or_huge_are_misses(pytester: pytest.Pytester) -> None:
    from pytest_geo.llm.cache import MAX_ENTRY_BYTES, ResponseCache

    cache = ResponseCache(pytester.path / "cache")
    keys = {"fifo": "aa" + "0" * 62, "zero": "bb" + "0" * 62, "huge": "cc" + "0" * 62}
    for key in keys.values():
        cache.path(key).parent.mkdir(parents=True)
    if hasattr(os, "mkfifo"):
        os.mkfifo(cache.path(keys["fifo"]))
    cache.path(keys["zero"]).symlink_to("/dev/zero")
    entry = {"key": keys["huge"], "model": "m", "text": "x" * MAX_ENTRY_BYTES, "prompt_tokens": 1,
             "completion_tokens": 1}
    cache.path(keys["huge"]).write_text(json.dumps(entry))
    done = run_limited(pytester, "from pathlib import Path\nfrom pytest_geo.llm.cache import ResponseCache\n"
                                 f"cache = ResponseCache(Path('cache'))\n"
                                 f"print([cache.get(k) for k in {list(keys.values())!r}])")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[None, None, None]"


@needs_fifo
def test_a_run_over_a_cache_with_planted_fifos_and_dev_zero_links_completes(served_project: Any) -> None:
    dataset = str(served_project.dataset(2))
    served_project.run(dataset).assert_outcomes(passed=2)
    cache = served_project.pytester.path / ".pytest_cache" / "d" / "geo"
    assert len(cache_entries(cache)) == 6
    entries = sorted((cache / "answers").glob("*.jsonl"))  # the files holding them
    assert entries
    for index, entry in enumerate(entries):
        entry.unlink()
        if index % 2:
            os.mkfifo(entry)
        else:
            entry.symlink_to("/dev/zero")
    served_project.server.reset()
    result = served_project.pytester.runpytest_subprocess(*served_project.args(dataset), timeout=HANG_GUARD)
    result.assert_outcomes(passed=2)
    assert len(served_project.server.requests) == 6  # every entry was a miss


# --- YAML suites: no alias bombs, no recursion, no silent overrides ----------------------

ALIAS_BOMB = "a0: &a0 [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]\n" for i in range(1, 10))


@pytest.mark.parametrize(("name", "text", "message"), [
    ("bomb", "suite: square\n" + ALIAS_BOMB,
     "bomb.geo.yaml:7: invalid YAML: aliases expand the document beyond 100,000 nodes"),
    ("deep", "suite: square\ndata: " + "[" * 20_000 + "]" * 20_000 + "\n",
     "deep.geo.yaml:2: invalid YAML: nested more than 100 levels deep"),
])
def test_yaml_bombs_are_invalid_yaml_in_bounded_memory(pytester: pytest.Pytester, name: str, text: str,
                                                       message: str) -> None:
    (pytester.path / f"{name}.geo.yaml").write_text(text)
    done = run_limited(pytester, "from pathlib import Path\n"
                                 "from pytest_geo.suites.suite_file import SuiteFileError, load_suite_file\n"
                                 "try:\n"
                                 f"    load_suite_file(Path('{name}.geo.yaml'), '{name}.geo.yaml')\n"
                                 "except SuiteFileError as exc:\n"
                                 "    print(exc)\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout == message + "\n"
    result = pytester.runpytest(f"{name}.geo.yaml")
    result.stdout.fnmatch_lines([message])
    no_traceback(result)


# --- clean failures ------------------------------------------------------------------------


@pytest.mark.parametrize("flag", ["--geo-report", "--geo-html"])
def test_a_report_path_that_is_a_directory_is_a_usage_error_at_start(pytester: pytest.Pytester, flag: str) -> None:
    copy_prompts(pytester.path / "prompts")
    (pytester.path / "rows.jsonl").write_text(ROW % "ok1")
    (pytester.path / "out").mkdir()
    result = pytester.runpytest("rows.jsonl", "--geo-mock", flag, "out")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: {flag}: out is a directory; name a file"])


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root writes anywhere")
def test_a_report_path_without_write_access_is_a_usage_error_at_start(pytester: pytest.Pytester) -> None:
    copy_prompts(pytester.path / "prompts")
    (pytester.path / "rows.jsonl").write_text(ROW % "ok1")
    (pytester.path / "locked").mkdir(mode=0o500)
    result = pytester.runpytest("rows.jsonl", "--geo-mock", "--geo-report", "locked/r.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --geo-report: cannot write locked/r.json: no write access to *locked"])


WRITE_FAILS_CONFTEST = '''
import shutil
from pathlib import Path

def pytest_sessionstart(session):
    # after the start check passed: the report's directory becomes a file
    shutil.rmtree("out")
    Path("out").write_text("")
'''


def test_a_report_write_failing_at_the_end_keeps_the_summary_and_the_other_report(pytester: pytest.Pytester) -> None:
    copy_prompts(pytester.path / "prompts")
    (pytester.path / "rows.jsonl").write_text(ROW % "ok1" + ROW % "ok2")
    pytester.makeconftest(WRITE_FAILS_CONFTEST)
    (pytester.path / "out").mkdir()
    result = pytester.runpytest("rows.jsonl", "--geo-mock", "--geo-report", "out/r.json", "--geo-html", "r.html")
    result.assert_outcomes(passed=2, failed=1)  # pytest-geo::report (test_hostile_round3.py)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["pytest-geo: --geo-report: cannot write out/r.json: Not a directory",
                                 "HTML report written to r.html", "Evals:", "- rows.jsonl::rank_improvement: *"])
    assert (pytester.path / "r.html").is_file()
    no_traceback(result)


def test_control_characters_from_data_and_answers_are_escaped_on_the_terminal(pytester: pytest.Pytester) -> None:
    copy_prompts(pytester.path / "prompts")
    evil = "\x1b[2J\x1b[31mred\x00nul\nnext"
    pytester.makeconftest(f'''
from pytest_geo.llm.mock import MockClient
from pytest_geo.llm.base import ModelError

class Evil(MockClient):
    async def complete(self, request):
        if "second" in request.context.get("query", ""):
            raise ModelError({evil!r})
        return await super().complete(request)

def pytest_geo_make_client(config, settings):
    return Evil()
''')
    rows = [json.loads(ROW % "x"), json.loads(ROW % "plain")]
    rows[0]["query_id"] = evil
    rows[1]["query"] = "second kettle"
    (pytester.path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = pytester.runpytest("rows.jsonl", "-v", "-rA")
    result.assert_outcomes(passed=1, failed=1)
    text = result.stdout.str()
    assert "\x1b" not in text and "\x00" not in text
    result.stdout.fnmatch_lines(["*rows.jsonl::\\x1b[[]2J\\x1b[[]31mred\\x00nul\\x0anext@line1 PASSED*",
                                 "rows.jsonl:2: error: \\x1b[[]2J\\x1b[[]31mred\\x00nul*",
                                 "- rows.jsonl::rank_improvement: * error: \\x1b[[]2J*"])


def test_a_report_path_under_a_file_is_a_usage_error_at_start(pytester: pytest.Pytester) -> None:
    copy_prompts(pytester.path / "prompts")
    (pytester.path / "rows.jsonl").write_text(ROW % "ok1")
    result = pytester.runpytest("rows.jsonl", "--geo-mock", "--geo-html", "rows.jsonl/r.html")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --geo-html: cannot write rows.jsonl/r.html: *rows.jsonl is not a directory"])
