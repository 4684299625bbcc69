"""--geo-judge: a panel of judges, each ranking every row before and after its rewrite
(one rewrite per variant, shared by the judges), per-judge, panel and agreement figures.

The fake server ranks the usual way for every model except those whose name holds
"reversed", which see everything the other way round: with `geo_rows` the target goes
from 3rd to 1st for a usual judge (+2) and from 1st to 3rd for a reversed one (-2)."""

from __future__ import annotations

import json
from collections import Counter
from importlib import resources
from typing import Any

import jsonschema
import pytest

from conftest import GeoProject

# The fake server's rewriter returns the description unchanged for this template.
KEEP_TEMPLATE_TEXT = "KEEP it as it is.\nTitle: {{title}}\nOriginal description: {{description}}\n"


def calls_by_model(project: GeoProject) -> Counter[tuple[str, str]]:
    """(model, rank or rewrite) of every chat request the fake server received."""
    seen: Counter[tuple[str, str]] = Counter()
    for request in project.server.requests:
        body = request["body"]
        system = next((m["content"] for m in body["messages"] if m["role"] == "system"), "")
        seen[(body["model"], "rank" if "ordered_ids" in system else "rewrite")] += 1
    return seen


def report(project: GeoProject, name: str = "r.json") -> dict[str, Any]:
    data: dict[str, Any] = json.loads((project.pytester.path / name).read_text(encoding="utf-8"))
    schema = json.loads(resources.files("pytest_geo").joinpath("schemas/report.schema.json").read_text("utf-8"))
    jsonschema.validate(data, schema)
    return data


def judges_of(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Node id -> the row's judges object."""
    return {row["nodeid"]: row["judges"] for row in data["rows"]}


def test_three_judges_make_j_plus_1_plus_j_calls_a_row_and_a_rerun_none(served_project: GeoProject) -> None:
    served_project.dataset(3)
    args = ("rows.jsonl", "--geo-judge", "a=m-a", "--geo-judge", "b=m-b", "--geo-judge", "c=m-c")
    served_project.run(*args).assert_outcomes(passed=3)
    assert calls_by_model(served_project) == {("m-a", "rank"): 6, ("m-b", "rank"): 6, ("m-c", "rank"): 6,
                                              ("gpt-4o-mini", "rewrite"): 3}
    served_project.server.reset()
    served_project.run(*args).assert_outcomes(passed=3)
    assert served_project.server.requests == []  # every answer from the cache


def test_judges_and_variants_make_j_plus_v_plus_jv_calls_a_row(served_project: GeoProject) -> None:
    """3 judges, 2 variants (one with its own rewriter model): 3 + 2 + 6 calls a row."""
    served_project.dataset(2)
    (served_project.pytester.path / "keep.txt").write_text(KEEP_TEMPLATE_TEXT, encoding="utf-8")
    result = served_project.run("rows.jsonl", "--geo-judge", "a=m-a", "--geo-judge", "b=m-b", "--geo-judge", "c=m-c",
                                "--geo-variant", "x=keep.txt", "--geo-variant", "y=keep.txt@m2",
                                "--geo-no-cache", "--geo-report", "r.json", "--geo-html", "r.html")
    result.assert_outcomes(passed=4)
    assert calls_by_model(served_project) == {("m-a", "rank"): 6, ("m-b", "rank"): 6, ("m-c", "rank"): 6,
                                              ("gpt-4o-mini", "rewrite"): 2, ("m2", "rewrite"): 2}
    assert len(served_project.server.requests) == 2 * (3 + 2 + 3 * 2)
    data = report(served_project)
    (comparison,) = data["variants"]
    assert list(comparison["matrix"]) == ["x", "y"]
    assert comparison["matrix"]["y"]["b"] == {"n": 2, "mean": 0.0, "stderr": 0.0}  # KEEP: nothing moves
    assert {(p["better"], p["worse"], p["judge"]) for p in comparison["judge_pairs"]} == {
        ("x", "y", "a"), ("x", "y", "b"), ("x", "y", "c"), ("x", "y", "panel")}
    result.stdout.fnmatch_lines(["*variants x judges (mean +/- stderr, n): a | b | c | panel",
                                 "    x: +0.0000 +/- 0.0000 (n=2) | *", "  x - y by a: n=2 mean_diff=+0.0000*"])
    html = (served_project.pytester.path / "r.html").read_text(encoding="utf-8")
    assert "<h2>Judges</h2>" in html and "variants x judges: rows.jsonl [train]" in html


def test_report_per_judge_panel_and_agreement(served_project: GeoProject) -> None:
    served_project.dataset(3)
    result = served_project.run("rows.jsonl", "--geo-judge", "a=m-a", "--geo-judge", "b=m-b-reversed",
                                "--geo-judge", "c=m-c", "--geo-report", "r.json", "--geo-html", "r.html")
    result.assert_outcomes(passed=3)
    data = report(served_project)
    (suite,) = data["suites"]
    assert suite["judges"] == {
        "a": {"n": 3, "avg_rank_improvement": 2.0, "win_rate": 1.0, "stderr_rank_improvement": 0.0},
        "b": {"n": 3, "avg_rank_improvement": -2.0, "win_rate": 0.0, "stderr_rank_improvement": 0.0},
        "c": {"n": 3, "avg_rank_improvement": 2.0, "win_rate": 1.0, "stderr_rank_improvement": 0.0}}
    assert suite["panel"]["n"] == 3 and suite["panel"]["avg_rank_improvement"] == pytest.approx(2 / 3)
    # Rows [2, -2, 2] three times: D_o = 3 * 64 / 2 / 9 = 32/3, D_e = 18 * 16 * 2 / 72 = 8
    assert suite["agreement"]["krippendorff_alpha"] == pytest.approx(1 - (32 / 3) / 8)
    # a and c agree (tau 1), b reverses both (tau -1): (1 - 1 - 1) / 3
    assert suite["agreement"]["mean_kendall_tau"] == pytest.approx(-1 / 3)
    assert suite["agreement"]["direction_agreement"] == 0.0 and suite["agreement"]["direction_rows"] == 3
    cells = judges_of(data)["rows.jsonl::r0"]
    assert cells["a"] == {"rank_before": 3, "rank_after": 1, "rank_improvement": 2, "error": None,
                          "order_before": ["a0", "b0", "t0"]}
    assert cells["b"] == {"rank_before": 1, "rank_after": 3, "rank_improvement": -2, "error": None,
                          "order_before": ["t0", "b0", "a0"]}
    result.stdout.fnmatch_lines([
        "judges of rows.jsonl:",
        "  judge a: n=3 avg_rank_improvement=2.0000 win_rate=1.0000 stderr_rank_improvement=0.0000",
        "  judge b: n=3 avg_rank_improvement=-2.0000 win_rate=0.0000 stderr_rank_improvement=0.0000",
        "  judge c: *",
        "  panel: n=3 avg_rank_improvement=0.6667 *",
        "  agreement: krippendorff_alpha=-0.3333 mean_kendall_tau=-0.3333 direction_agreement=0.0000 (over 3 rows*"])
    html = (served_project.pytester.path / "r.html").read_text(encoding="utf-8")
    assert "Krippendorff" in html and '"judges":[["a",3,1,2,null,["a0","b0","t0"]]' in html
