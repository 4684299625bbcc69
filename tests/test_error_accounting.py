"""Errored rows score 0.0 in the mean but are counted as errors, never as unchanged rows,
sign-test evidence or baseline pairs."""

from __future__ import annotations

import json
from typing import Any

import pytest

pytestmark = pytest.mark.plugin

FLAKY_CONFTEST = '''
from pytest_geo.llm.mock import MockClient

class Flaky(MockClient):
    """The ranker fails for the queries listed in failing.txt (read per call)."""
    async def complete(self, request):
        import pathlib
        failing = [w for w in pathlib.Path(__file__).with_name("failing.txt").read_text().split(",") if w]
        if request.role == "ranker" and any(w in request.context.get("query", "") for w in failing):
            raise RuntimeError("ranker down")
        return await super().complete(request)

def pytest_geo_make_client(config, settings):
    return Flaky()
'''


def read(pytester: pytest.Pytester, name: str) -> dict[str, Any]:
    return json.loads((pytester.path / name).read_text(encoding="utf-8"))


@pytest.fixture
def flaky(geo_project: pytest.Pytester) -> pytest.Pytester:
    geo_project.makeconftest(FLAKY_CONFTEST)
    (geo_project.path / "failing.txt").write_text("")
    return geo_project


def fail_queries(project: pytest.Pytester, *words: str) -> None:
    (project.path / "failing.txt").write_text(",".join(words))


def test_errors_are_counted_and_left_out_of_movement(flaky: pytest.Pytester) -> None:
    fail_queries(flaky, "travel", "running")
    result = flaky.runpytest("data/smoke.jsonl", "--geo-report", "r.json")
    result.assert_outcomes(passed=6, failed=2)
    report = read(flaky, "r.json")
    [suite] = report["suites"]
    assert (suite["n"], suite["errors"], suite["error_rate"]) == (8, 2, 0.25)
    assert suite["score"] == pytest.approx(6 * 2.0 / 8)  # errors still score 0.0 in the mean
    # Every row that ran moved up; the two errors are neither "unchanged" nor ties.
    assert (suite["moved_up"], suite["unchanged"], suite["moved_down"]) == (1.0, 0.0, 0.0)
    assert suite["movement_n"] == 6 and suite["sign_test_p"] == pytest.approx(0.5 ** 6)
    stats = report["geo"]["statistics"]
    assert stats["datasets"]["data/smoke.jsonl"]["movement_n"] == 6 == stats["overall"]["movement_n"]
    result.stdout.fnmatch_lines([
        "data/smoke.jsonl: n=8 avg_rank_improvement=1.5000 *",
        "  ci95=* up/unchanged/down=1.00/0.00/0.00 sign_test_p=0.0156 (over 6 rows without error)"
        " errors=2 error_rate=0.2500",
    ])


def test_suite_errors_are_reported(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_s='''
import pytest_geo
s_eval = pytest_geo.suite("s", data={"rows": [(i, 0) for i in range(4)]})

@s_eval.metric
def m(rows, expected):
    if rows == 2:
        raise ValueError("boom")
    return 1.0
''')
    result = pytester.runpytest("-p", "no:cacheprovider", "--geo-report", "r.json")
    result.assert_outcomes(passed=3, failed=1)
    [suite] = read(pytester, "r.json")["suites"]
    assert (suite["errors"], suite["error_rate"], suite["score"]) == (1, 0.25, 0.75)
    result.stdout.fnmatch_lines(["errors: s::m [[]train[]]: 1 of 4 rows errored (error_rate=0.2500), each scored 0.0"])


def test_baseline_pairs_only_rows_clean_in_both_runs(flaky: pytest.Pytester) -> None:
    flaky.runpytest("data/smoke.jsonl", "--geo-report", "base.json").assert_outcomes(passed=8)
    # Seven rows error now: paired as 0.0 against 2.0 they would read as a significant
    # drop (7 of 7 changed rows down, p = 0.016). They are left out instead.
    fail_queries(flaky, "travel", "vacuum", "running", "espresso", "noise", "kids", "air")
    result = flaky.runpytest("data/smoke.jsonl", "--geo-baseline", "base.json", "--geo-fail-on-regression",
                             "--geo-max-error-rate", "1", "--geo-report", "r.json")
    report = read(flaky, "r.json")
    [suite] = report["suites"]
    [comparison] = report["baseline"]["suites"]
    assert suite["errors"] == 7 == comparison["errored_pairs"]
    assert comparison["paired"]["n"] == 1 and comparison["paired"]["mean_diff"] == 0.0
    assert comparison["regression"] is False
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["*paired n=1 *; 7 row(s) with an error in either run left out of the pairing"])


def test_html_counts_errors_and_leaves_them_out_of_the_histogram(flaky: pytest.Pytester) -> None:
    fail_queries(flaky, "travel", "running")
    flaky.runpytest("data/smoke.jsonl", "--geo-html", "r.html")
    page = (flaky.path / "r.html").read_text(encoding="utf-8")
    assert "<th>errors (rate)</th>" in page and ">2 (0.2500)</td>" in page
    histogram = page.split('data-figure="histogram"')[1].split("</svg>")[0]
    assert ">+2<" in histogram and ">+0<" not in histogram  # errored rows are no "+0" move
