"""Numbers in the reports as a reader needs them: bounded scores get intervals within
their bounds, the terminal, JSON and HTML agree."""

from __future__ import annotations

import pytest
from test_reporting import read, validate

from pytest_geo.report.stats import wilson_interval

pytestmark = pytest.mark.plugin

ACCURACY = '''
import pytest_geo
s_eval = pytest_geo.suite("acc", data={"rows": [(1, 1), (2, 0), (3, 3)]})

@s_eval.metric
def exact(rows, expected):
    return rows == expected, ""
'''


def test_a_bool_metric_gets_a_wilson_interval_and_geo_keeps_t(geo_project: pytest.Pytester) -> None:
    geo_project.makepyfile(test_acc=ACCURACY)
    result = geo_project.runpytest("test_acc.py", "data/smoke.jsonl", "--geo-mock", "--geo-report", "r.json",
                                   "--geo-html", "r.html")
    result.assert_outcomes(passed=11)  # a wrong answer scores 0; only errors fail
    report = read(geo_project, "r.json")
    validate(report)
    suites = {s["suite"]: s for s in report["suites"]}
    accuracy = suites["acc"]
    assert accuracy["score"] == pytest.approx(2 / 3)
    assert accuracy["ci95_method"] == "wilson"
    assert accuracy["ci95"] == pytest.approx(list(wilson_interval(2, 3) or ()))
    assert 0.0 <= accuracy["ci95"][0] < accuracy["score"] < accuracy["ci95"][1] <= 1.0
    geo = suites["data/smoke.jsonl"]
    assert geo["ci95_method"] == "t"
    assert report["geo"]["statistics"]["overall"]["ci95_method"] == "t"
    page = (geo_project.path / "r.html").read_text(encoding="utf-8")
    low, high = accuracy["ci95"]
    assert f"[{low:.4f}, {high:.4f}]" in page
