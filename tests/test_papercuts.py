"""What a new user tripped on (issue 37): a metric's traceback, a row threshold, output
caps sized to the answer, unpriced local servers, per-call latency and tokens, ties,
the split in the header, `egeo optimize`'s budget and cache, and messages that read right."""

from __future__ import annotations

import json

import pytest


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-p", "no:cacheprovider", *args)


# --- 1. a metric that raises shows its traceback --------------------------------------------

RAISING = '''
import pytest_geo
s_eval = pytest_geo.suite("s", data={"rows": [(1, 1), (0, 1), (2, 2)]})

def helper(x):
    return 1 / x

@s_eval.metric
def ratio(rows, expected):
    return helper(rows)
'''


def test_a_metric_that_raises_shows_its_traceback_and_the_row_scores_zero(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_s=RAISING)
    result = run(pytester, "--geo-report", "r.json")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines([
        "*_ train[[]1[]] _*",
        "    def ratio(rows, expected):",
        ">       return helper(rows)",
        "test_s.py:9: ",
        "*def helper(x):",
        ">       return 1 / x",
        "E       ZeroDivisionError: division by zero",
        "test_s.py:5: ZeroDivisionError",
    ])
    result.stdout.no_fnmatch_line("*pytest_geo*suite.py*")  # the plugin's own frames are cut, as pytest cuts its own
    assert result.stdout.lines[-2] == "- s::ratio: 0.5000 | error: ZeroDivisionError: division by zero"
    rows = json.loads((pytester.path / "r.json").read_text())["rows"]
    assert [r["score"] for r in rows] == [1.0, 0.0, 0.5]


def test_a_metrics_traceback_follows_tb(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_s=RAISING)
    short = run(pytester, "--tb=short")
    short.stdout.fnmatch_lines([
        "test_s.py:9: in ratio",
        "    return helper(rows)",
        "test_s.py:5: in helper",
        "    return 1 / x",
        "E   ZeroDivisionError: division by zero",
    ])
    line = run(pytester, "--tb=line")
    line.stdout.fnmatch_lines(["*test_s.py:5: ZeroDivisionError: division by zero"])
    none = run(pytester, "--tb=no")
    none.stdout.no_fnmatch_line("*1 / x*")
    none.assert_outcomes(passed=2, failed=1)
