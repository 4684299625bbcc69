"""Hostile inputs (issue 14): no wrong data, bounded time and memory, no key in any file,
clean failures. The static inputs live in tests/corpus/; inputs that are large or special
(FIFOs, /dev/zero links, alias bombs) are made here, at test time."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from conftest import copy_prompts

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
    for row in rows:
        line = source[row["line"] - 1]
        assert row["target_id"] == line["target_id"]
        assert row["rank_before"] == len(line["candidates"])  # the mock ranks the plain target last


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
