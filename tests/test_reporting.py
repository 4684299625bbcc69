"""The JSON report's schema and metadata, statistics in the summary, repeats, baseline
comparison and gating, and the HTML report."""

from __future__ import annotations

import gzip
import json
import random
from html.parser import HTMLParser
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from conftest import without_run_dependent
from pytest_geo.report.metadata import base_url_host
from pytest_geo.settings import DEFAULT_SEED

pytestmark = pytest.mark.plugin

ROW = {
    "query": "red running shoes",
    "candidates": [
        {"id": "a", "title": "Blue sandal", "description": "A blue sandal."},
        {"id": "b", "title": "Red runner", "description": "Red running shoes for road running."},
        {"id": "c", "title": "Trail X", "description": "Lugged outsole, 280 g."},
        {"id": "d", "title": "Boot", "description": "A winter boot."},
    ],
    "target_id": "c",
}

SUITE = '''
import pytest_geo
s_eval = pytest_geo.suite("s", data={"rows": [(i, i % 2) for i in range(4)]}, threshold=0.1)

@s_eval.metric
def m(rows, expected):
    return rows % 2 == expected, f"row {rows}"
'''


def report_schema() -> dict[str, Any]:
    return json.loads(resources.files("pytest_geo").joinpath("schemas/report.schema.json").read_text("utf-8"))


def validate(report: dict[str, Any]) -> None:
    schema = report_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker()).validate(report)


def read(pytester: pytest.Pytester, name: str) -> dict[str, Any]:
    return json.loads((pytester.path / name).read_text(encoding="utf-8"))


def transcript_lines(report_path: Path) -> list[dict[str, Any]]:
    """The lines of the transcripts file the report at `report_path` names, read with the
    stdlib alone."""
    report = json.loads(report_path.read_text(encoding="utf-8"))
    with gzip.open(report_path.parent / report["transcripts"]["path"], "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


def with_calls(report_path: Path) -> dict[str, Any]:
    """The report with each row's calls put back from its transcripts file (as format 1
    held them): for the tests of what a transcript holds."""
    report: dict[str, Any] = json.loads(report_path.read_text(encoding="utf-8"))
    lines = {line["nodeid"]: line for line in transcript_lines(report_path)}
    for row in report["rows"]:
        line = lines.get(row["nodeid"])
        if line is None:
            continue
        if "repeats" in line:
            for repeat, run in zip(row["repeats"], line["repeats"], strict=True):
                assert repeat["repeat"] == run["repeat"]
                repeat["calls"] = run["calls"]
        else:
            row["calls"] = line["calls"]
    return report


def test_reports_match_the_shipped_schema(geo_project: pytest.Pytester) -> None:
    geo_project.makepyfile(test_s=SUITE)
    result = geo_project.runpytest("data/smoke.jsonl", "test_s.py", "--geo-mock", "--geo-report", "r.json")
    result.assert_outcomes(passed=12)
    report = read(geo_project, "r.json")
    validate(report)
    assert report["format_version"] == 2
    geo_project.runpytest("data/smoke.jsonl", "--geo-mock", "--geo-repeats", "2", "--geo-report", "rep.json",
                          "--geo-baseline", "r.json")
    validate(read(geo_project, "rep.json"))
    broken = {**report, "rows": [{**report["rows"][0], "score": "high"}]}
    with pytest.raises(jsonschema.ValidationError):
        validate(broken)


def test_metadata_records_models_prompts_seed_versions_and_time(geo_project: pytest.Pytester) -> None:
    result = geo_project.runpytest("data/smoke.jsonl", "--geo-mock", "--geo-seed", "7", "--geo-ranker-model", "rk-1",
                                   "--geo-report", "r.json")
    result.assert_outcomes(passed=8)
    meta = read(geo_project, "r.json")["metadata"]
    assert meta["models"]["ranker"] == "rk-1" and meta["mock"] is True
    assert meta["seed"] == 7 and meta["repeats"] == 1
    import hashlib
    expected = hashlib.sha256((geo_project.path / "prompts" / "rewriter_user.txt").read_bytes()).hexdigest()
    assert meta["prompts_sha256"]["rewriter_user.txt"] == expected
    assert set(meta["versions"]) == {"pytest-geo", "pytest", "openai", "python"}
    assert meta["versions"]["pytest"] == pytest.__version__
    assert meta["started_at"].endswith("+00:00") and meta["duration_s"] >= 0


def test_base_url_keeps_only_the_host(geo_project: pytest.Pytester) -> None:
    secret_url = "https://user:sk-SECRET@llm.example.com:8443/v1?api_key=sk-OTHER"
    assert base_url_host(secret_url) == "llm.example.com"
    assert base_url_host("localhost:8000") == "localhost"
    assert base_url_host(None) is None
    geo_project.makeconftest(
        "from pytest_geo.llm.mock import MockClient\n"
        "def pytest_geo_make_client(config, settings):\n    return MockClient()\n"
    )
    result = geo_project.runpytest("data/smoke.jsonl", "--geo-base-url", secret_url, "--geo-report", "r.json")
    result.assert_outcomes(passed=8)
    text = (geo_project.path / "r.json").read_text()
    assert json.loads(text)["metadata"]["base_url_host"] == "llm.example.com"
    assert "SECRET" not in text and "OTHER" not in text and "8443" not in text


def test_statistics_in_report_and_summary(geo_project: pytest.Pytester) -> None:
    geo_project.makeconftest('''
from pytest_geo.llm.mock import MockClient
class Mixed(MockClient):
    async def complete(self, request):
        if request.role == "rewriter" and request.context["query"].startswith(("best", "quiet")):
            return type(await super().complete(request))(text='{"rewritten_description": "plain"}')
        return await super().complete(request)
def pytest_geo_make_client(config, settings):
    return Mixed()
''')
    result = geo_project.runpytest("data/smoke.jsonl", "--geo-report", "r.json")
    report = read(geo_project, "r.json")
    improvements = [r["rank_improvement"] for r in report["rows"]]
    assert sorted(improvements).count(0) == improvements.count(0) > 0
    ups, ties = sum(1 for v in improvements if v > 0), improvements.count(0)
    stats = report["geo"]["statistics"]["datasets"]["data/smoke.jsonl"]
    assert stats["moved_up"] == pytest.approx(ups / 8) and stats["unchanged"] == pytest.approx(ties / 8)
    assert stats["moved_down"] == 0.0
    assert stats["sign_test_p"] == pytest.approx(0.5 ** ups)  # one-sided, ties dropped
    suite = report["suites"][0]
    half = 2.364624 * suite["stderr"]  # t(0.975, df=7)
    assert suite["ci95"] == pytest.approx([suite["score"] - half, suite["score"] + half], rel=1e-5)
    assert report["geo"]["statistics"]["overall"] == stats
    result.stdout.fnmatch_lines([
        "data/smoke.jsonl: n=8 *",
        f"  ci95=[[]{suite['ci95'][0]:.4f}, {suite['ci95'][1]:.4f}[]] up/unchanged/down={ups / 8:.2f}/{ties / 8:.2f}/0.00"
        f" sign_test_p={0.5 ** ups:.4f} (over 8 rows without error) errors=0 error_rate=0.0000",
    ])


POSITION_CONFTEST = '''
import json
from pytest_geo.llm.base import ChatResponse
from pytest_geo.llm.mock import MockClient

class PositionBiased(MockClient):
    """Ranks in the listed order, except a rewritten target goes first."""
    async def complete(self, request):
        if request.role != "ranker":
            return await super().complete(request)
        ids = [c["id"] for c in request.context["candidates"]]
        first = [c["id"] for c in request.context["candidates"] if c["description"].startswith("Best for buyers")]
        return ChatResponse(text=json.dumps({"ordered_ids": first + [i for i in ids if i not in first]}))

def pytest_geo_make_client(config, settings):
    return PositionBiased()
'''


def test_repeats_shuffle_candidates_per_repeat_and_average(geo_project: pytest.Pytester) -> None:
    geo_project.makeconftest(POSITION_CONFTEST)
    geo_project.makefile(".jsonl", rows="\n".join(json.dumps({**ROW, "query_id": f"r{i}"}) for i in range(3)))

    def rows(*args: str) -> list[dict[str, Any]]:
        result = geo_project.runpytest("rows.jsonl", "--geo-report", "r.json", *args)
        result.assert_outcomes(passed=3)
        return without_run_dependent(read(geo_project, "r.json")["rows"])

    once = rows()
    assert [r["rank_before"] for r in once] == [3, 3, 3] and "repeats" not in once[0]
    first = rows("--geo-repeats", "5")
    for row in first:
        assert [r["repeat"] for r in row["repeats"]] == [0, 1, 2, 3, 4]
        for run in row["repeats"]:
            assert sorted(run["order"]) == ["a", "b", "c", "d"]
            assert run["rank_before"] == run["order"].index("c") + 1  # the repeat's order, before ...
            assert run["rank_after"] == 1  # ... and after (the rewritten target moves first)
        assert row["score"] == pytest.approx(sum(r["rank_improvement"] for r in row["repeats"]) / 5)
        assert row["rank_before"] == pytest.approx(sum(r["rank_before"] for r in row["repeats"]) / 5)
    orders = [tuple(run["order"]) for row in first for run in row["repeats"]]
    assert len(set(orders)) > 5  # differs per repeat and per row
    # The documented rule, computed here: one Random per (seed, dataset, row, repeat).
    for row in first:
        for run in row["repeats"]:
            expected = [c["id"] for c in ROW["candidates"]]
            random.Random(f"{DEFAULT_SEED}\x1frepeat\x1frows.jsonl\x1f{row['query_id']}\x1f{run['repeat']}").shuffle(expected)
            assert run["order"] == expected
    assert rows("--geo-repeats", "5") == first  # seeded: the same on every run
    geo_project.makeini("[pytest]\ngeo_repeats = 5\n")
    assert rows() == first
    assert rows("--geo-seed", "99") != first


def test_repeats_must_be_positive(geo_project: pytest.Pytester) -> None:
    result = geo_project.runpytest("--geo-repeats", "0")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--geo-repeats*must be at least 1*"])


def _lower_baseline(report: dict[str, Any], by: float) -> dict[str, Any]:
    rows = [{**r, "score": r["score"] - by} for r in report["rows"]]
    suites = [{**s, "score": s["score"] - by} for s in report["suites"]]
    return {**report, "rows": rows, "suites": suites}


def test_baseline_comparison_in_summary_and_report(geo_project: pytest.Pytester) -> None:
    geo_project.runpytest("data/smoke.jsonl", "--geo-mock", "--geo-report", "base.json")
    base = read(geo_project, "base.json")
    (geo_project.path / "base.json").write_text(json.dumps(_lower_baseline(base, 1.0)))
    result = geo_project.runpytest("data/smoke.jsonl", "--geo-mock", "--geo-baseline", "base.json",
                                   "--geo-report", "r.json", "--geo-fail-on-regression", "-k", "not q8")
    assert result.ret == pytest.ExitCode.OK  # an improvement never fails the run
    result.stdout.fnmatch_lines([
        "baseline base.json:",
        "  data/smoke.jsonl::rank_improvement [[]train[]]: 2.0000 vs 1.0000 (diff +1.0000); paired n=7"
        " mean_diff=+1.0000 stderr=0.0000 sign_test_p=0.0156",
        "Evals:",
    ])
    compared = read(geo_project, "r.json")["baseline"]
    assert compared["path"] == "base.json"
    [suite] = compared["suites"]
    assert suite["diff"] == 1.0 and suite["regression"] is False
    assert suite["paired"] == {"n": 7, "mean_diff": 1.0, "stderr": 0.0, "improved": 7, "worsened": 0,
                               "unchanged": 0, "sign_test_p": pytest.approx(2 / 128)}


def test_significant_drop_fails_only_with_the_flag(geo_project: pytest.Pytester) -> None:
    geo_project.runpytest("data/smoke.jsonl", "--geo-mock", "--geo-report", "base.json")
    base = read(geo_project, "base.json")
    (geo_project.path / "base.json").write_text(json.dumps(_lower_baseline(base, -0.5)))
    result = geo_project.runpytest("data/smoke.jsonl", "--geo-mock", "--geo-baseline", "base.json")
    assert result.ret == pytest.ExitCode.OK
    result = geo_project.runpytest("data/smoke.jsonl", "--geo-mock", "--geo-baseline", "base.json",
                                   "--geo-fail-on-regression")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=8, failed=1)
    result.stdout.fnmatch_lines(["*_ data/smoke.jsonl::regression _*",  # the failure's own section, in full
                                 "dropped against the baseline: mean_diff=-0.5000 over 8 paired rows,"
                                 " sign_test_p=0.0078 < 0.05",
                                 "FAILED data/smoke.jsonl::regression - dropped against the baseline*",
                                 "*data/smoke.jsonl::rank_improvement [[]train[]]: * REGRESSION", "Evals:"])
    # five rows are too few for p < 0.05 (two-sided sign test, p = 1/16): not significant
    result = geo_project.runpytest("data/smoke.jsonl", "--geo-mock", "--geo-baseline", "base.json",
                                   "--geo-fail-on-regression", "-k", "q1 or q2 or q3 or q4 or q5")
    assert result.ret == pytest.ExitCode.OK


def test_fail_on_regression_needs_a_baseline(geo_project: pytest.Pytester) -> None:
    result = geo_project.runpytest("data/smoke.jsonl", "--geo-mock", "--geo-fail-on-regression")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --geo-fail-on-regression needs --geo-baseline PATH to compare with"])


def test_suite_rows_compare_pairwise_too(geo_project: pytest.Pytester) -> None:
    geo_project.makepyfile(test_s=SUITE)
    geo_project.runpytest("test_s.py", "--geo-report", "base.json")
    base = read(geo_project, "base.json")
    base["rows"] = base["rows"][:3]
    (geo_project.path / "base.json").write_text(json.dumps(base))
    geo_project.runpytest("test_s.py", "--geo-baseline", "base.json", "--geo-report", "r.json")
    [suite] = read(geo_project, "r.json")["baseline"]["suites"]
    assert suite["paired"]["n"] == 3 and suite["diff"] == 0.0


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "ERROR: --geo-baseline: baseline report not found: nope.json"),
        ("{not json", "ERROR: --geo-baseline: nope.json is not JSON: *"),
        ('{"suites": []}', "ERROR: --geo-baseline: nope.json is not a pytest-geo report: 'rows' is missing or not a list"),
        ('{"suites": [{"suite": "x"}], "rows": []}', "ERROR: --geo-baseline: nope.json is not a pytest-geo report:"
                                                     " suites[[]0[]] has no 'metric'"),
    ],
)
def test_bad_baseline_is_a_usage_error(geo_project: pytest.Pytester, content: str | None, message: str) -> None:
    if content is not None:
        (geo_project.path / "nope.json").write_text(content)
    result = geo_project.runpytest("data/smoke.jsonl", "--geo-mock", "--geo-baseline", "nope.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


VOID = {"meta", "br", "hr", "img", "input", "link", "col", "area", "base", "wbr", "source"}
SVG_LEAVES = {"rect", "line"}


class Checker(HTMLParser):
    """Balanced tags, and what the page holds."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.scripts: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_endtag(self, tag: str) -> None:
        assert self.stack and self.stack[-1] == tag, f"</{tag}> closes <{self.stack[-1] if self.stack else None}>"
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        if self.stack and self.stack[-1] == "script":
            self.scripts.append(data)
        self.text.append(data)


def test_html_report_is_self_contained_well_formed_and_escaped(geo_project: pytest.Pytester) -> None:
    hostile = {**ROW, "query_id": "x1", "candidates": [
        *ROW["candidates"][:2], {"id": "c", "title": "<b>Trail</b>", "description": "</td><script>alert(1)</script>&amp;"},
        ROW["candidates"][3]]}
    geo_project.makefile(".jsonl", rows=json.dumps(hostile) + "\n")
    result = geo_project.runpytest("data/smoke.jsonl", "rows.jsonl", "--geo-mock", "--geo-html", "out/report.html")
    result.assert_outcomes(passed=9)
    result.stdout.fnmatch_lines(["HTML report written to out/report.html"])
    page = (geo_project.path / "out" / "report.html").read_text(encoding="utf-8")
    checker = Checker()
    checker.feed(page)
    checker.close()
    assert checker.stack == []
    assert page.startswith("<!DOCTYPE html>")
    names = [tag for tag, _ in checker.tags]
    assert names.count("script") == 3  # the rows, the transcripts (both JSON data) and the viewer
    blobs = {attrs.get("id"): text for (tag, attrs), text in
             zip([t for t in checker.tags if t[0] == "script"], checker.scripts, strict=True)}
    assert set(blobs) == {"geo-rows", "geo-transcripts", None}
    assert "alert" not in blobs[None] and "<" not in blobs["geo-rows"] + blobs["geo-transcripts"]
    assert not [a for _, attrs in checker.tags for k, a in attrs.items() if k in ("src", "href")]
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "") and "https://" not in page
    rows = json.loads(blobs["geo-rows"])["rows"]
    hostile_row = next(r for r in rows if r["id"].endswith("x1"))
    # the hostile description reaches the viewer intact, as data: the script sets it as text
    assert "".join(text for op, text in hostile_row["diff"] if op >= 0) == \
        "Best for buyers who want a clear, reliable choice. </td><script>alert(1)</script>&amp; Key specs are easy to "\
        "scan, with differentiated value over typical alternatives."
    figures = {attrs.get("data-figure") for tag, attrs in checker.tags if tag == "svg"}
    assert figures == {"histogram", "before-after"}
    bars = [attrs for tag, attrs in checker.tags if tag == "rect" and attrs.get("height") not in (None, "10", "0.0")]
    assert len(bars) >= 3  # the +2 histogram bar, the before bars at rank 3/4, the after bar at rank 1
    tables = [attrs.get("class") for tag, attrs in checker.tags if tag == "table"]
    assert tables == ["suites", "usage", "rows"]
    # suites header + 2, usage header + ranker and rewriter, rows header
    assert sum(1 for tag, attrs in checker.tags if tag == "tr") == 1 + 2 + 1 + 2 + 1
    assert len(rows) == 9 and "addEventListener" in blobs[None]  # the sortable table


def test_no_html_without_rows(geo_project: pytest.Pytester) -> None:
    geo_project.makepyfile(test_plain="def test_ok():\n    pass\n")
    geo_project.runpytest("test_plain.py", "--geo-html", "r.html").assert_outcomes(passed=1)
    assert not (geo_project.path / "r.html").exists()


def test_report_lines_come_together_after_the_metrics(geo_project: pytest.Pytester) -> None:
    result = geo_project.runpytest("data/smoke.jsonl", "--geo-mock", "--geo-report", "r.json",
                                   "--geo-html", "r.html")
    lines = result.stdout.lines
    metrics = next(i for i, line in enumerate(lines) if line.startswith("data/smoke.jsonl: n=8"))
    written = lines.index("report written to r.json")
    assert lines[written + 1] == "HTML report written to r.html"
    assert metrics < written < lines.index("Evals:")
