"""The plugin end to end: GEO datasets as items, selection, errors, reports, the mock."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.plugin

ROW = {
    "query": "red running shoes",
    "candidates": [
        {"id": "a", "title": "Blue sandal", "description": "A blue sandal."},
        {"id": "b", "title": "Red runner", "description": "Red running shoes for road running."},
        {"id": "c", "title": "Trail X", "description": "Lugged outsole, 280 g."},
    ],
    "target_id": "c",
}


def jsonl(*rows: object) -> str:
    return "\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n"


def test_each_row_is_an_item_with_a_stable_node_id(geo_project: pytest.Pytester) -> None:
    result = geo_project.runpytest("data/smoke.jsonl", "--geo-mock", "--collect-only", "-q")
    result.stdout.fnmatch_lines([f"data/smoke.jsonl::q{i}" for i in range(1, 9)])
    assert result.ret == 0


def test_rows_without_query_id_are_named_by_line(geo_project: pytest.Pytester) -> None:
    geo_project.makefile(".jsonl", rows=jsonl(ROW, "", ROW))
    result = geo_project.runpytest("rows.jsonl", "--geo-mock", "--collect-only", "-q")
    result.stdout.fnmatch_lines(["rows.jsonl::line1", "rows.jsonl::line3"])


def test_mock_smoke_run_reports_the_seed_metrics(geo_project: pytest.Pytester) -> None:
    result = geo_project.runpytest("data/smoke.jsonl", "--geo-mock")
    result.assert_outcomes(passed=8)
    result.stdout.fnmatch_lines([
        "*pytest-geo evaluation*",
        "data/smoke.jsonl: n=8 avg_rank_improvement=2.0000 win_rate=1.0000 stderr_rank_improvement=0.0000",
    ])


@pytest.mark.parametrize("value", ["1", "true", "YES", "on"])
def test_mock_from_environment(geo_project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("GEO_EVAL_MOCK", value)
    geo_project.runpytest("data/smoke.jsonl").assert_outcomes(passed=8)


def test_without_mock_or_key_the_run_stops_at_start(geo_project: pytest.Pytester) -> None:
    result = geo_project.runpytest("data/smoke.jsonl")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: no model credentials: set OPENAI_API_KEY*--geo-mock*"])
    result.stdout.no_fnmatch_line("*passed*")


def test_falsy_mock_env_is_not_the_mock(geo_project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GEO_EVAL_MOCK", "0")
    assert geo_project.runpytest("data/smoke.jsonl").ret == pytest.ExitCode.USAGE_ERROR


def test_missing_key_does_not_affect_runs_without_geo_rows(geo_project: pytest.Pytester) -> None:
    geo_project.makepyfile(test_plain="def test_ok():\n    assert True\n")
    geo_project.runpytest("test_plain.py").assert_outcomes(passed=1)


def test_geo_dataset_option_and_ini(geo_project: pytest.Pytester) -> None:
    result = geo_project.runpytest("--geo-dataset", "data/smoke.jsonl", "--geo-mock", "-q")
    result.assert_outcomes(passed=8)
    geo_project.makeini("[pytest]\ngeo_datasets = data/smoke.jsonl\n")
    result = geo_project.runpytest("--geo-mock", "-q", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=8)


def test_dataset_named_twice_is_collected_once(geo_project: pytest.Pytester) -> None:
    result = geo_project.runpytest("data/smoke.jsonl", "--geo-dataset", "data/smoke.jsonl", "--geo-mock")
    result.assert_outcomes(passed=8)


@pytest.mark.parametrize("args", [["--geo-dataset", "nope.jsonl"], []])
def test_missing_dataset_is_a_usage_error(geo_project: pytest.Pytester, args: list[str]) -> None:
    if not args:
        geo_project.makeini("[pytest]\ngeo_datasets = nope.jsonl\n")
    result = geo_project.runpytest(*args, "--geo-mock")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: *dataset not found: *nope.jsonl"])


def test_jsonl_files_are_not_collected_unless_named(geo_project: pytest.Pytester) -> None:
    result = geo_project.runpytest("--geo-mock", "--collect-only", "-q")
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    result.stdout.no_fnmatch_line("*smoke.jsonl::*")


def test_disabling_the_plugin(geo_project: pytest.Pytester) -> None:
    result = geo_project.runpytest("-p", "no:geo", "--collect-only", "-q", "data/smoke.jsonl")
    assert result.ret == pytest.ExitCode.USAGE_ERROR  # nothing collects a .jsonl file any more
    result.stderr.fnmatch_lines(["ERROR: not found: */data/smoke.jsonl"])
    result.stdout.no_fnmatch_line("*smoke.jsonl::q1*")
    assert geo_project.runpytest("-p", "no:geo", "--geo-mock").ret == pytest.ExitCode.USAGE_ERROR  # no such flag


def test_items_carry_the_registered_geo_marker(geo_project: pytest.Pytester) -> None:
    geo_project.makepyfile(test_plain="def test_ok():\n    assert True\n")
    result = geo_project.runpytest("data/smoke.jsonl", "test_plain.py", "--geo-mock", "--strict-markers", "-m", "geo")
    result.assert_outcomes(passed=8, deselected=1)
    result = geo_project.runpytest("data/smoke.jsonl", "test_plain.py", "--geo-mock", "-m", "not geo")
    result.assert_outcomes(passed=1, deselected=8)


def test_deselected_rows_are_neither_run_nor_counted(counting_client: pytest.Pytester) -> None:
    result = counting_client.runpytest(
        "data/smoke.jsonl", "--geo-mock", "-k", "q1 or q2", "--deselect", "data/smoke.jsonl::q2",
        "--geo-report", "report.json",
    )
    result.assert_outcomes(passed=1, deselected=7)
    calls = json.loads((counting_client.path / "calls.json").read_text())
    assert len(calls) == 3
    assert {query for _, query in calls} == {"best lightweight laptop for travel under 1kg"}
    report = json.loads((counting_client.path / "report.json").read_text())
    assert report["geo"]["overall"]["n"] == 1
    assert [r["query_id"] for r in report["rows"]] == ["q1"]


def test_last_failed_reruns_only_the_failed_row(geo_project: pytest.Pytester) -> None:
    geo_project.makefile(".jsonl", rows=jsonl({**ROW, "query_id": "good"}, {**ROW, "query_id": "bad", "target_id": "zz"}))
    geo_project.runpytest("rows.jsonl", "--geo-mock").assert_outcomes(passed=1, failed=1)
    result = geo_project.runpytest("rows.jsonl", "--geo-mock", "--lf")
    result.assert_outcomes(failed=1, deselected=1)


MALFORMED = [
    ("{not json", "rows.jsonl:2: invalid JSON: Expecting property name enclosed in double quotes at column 2"),
    (json.dumps({"candidates": ROW["candidates"]}), "rows.jsonl:2: row: 'query' is a required property"),
    (json.dumps({**ROW, "target_id": "zz"}), "rows.jsonl:2: target_id 'zz' is not among the candidate ids (a, b, c)"),
    (json.dumps({**ROW, "candidates": [ROW["candidates"][0]] * 2, "target_id": "a"}),
     "rows.jsonl:2: duplicate candidate ids: a"),
    (json.dumps({**ROW, "candidates": ROW["candidates"][:1], "target_id": "a"}),
     "rows.jsonl:2: fewer than 2 candidates (got 1)"),
    (json.dumps({**ROW, "candidates": [{"id": "a", "title": "x"}, ROW["candidates"][1]]}),
     "rows.jsonl:2: candidates[0]: 'description' is a required property"),
    (json.dumps({**ROW, "query": 7}), "rows.jsonl:2: query: expected string, got int 7"),
    ("\ufeff\ufeff" + json.dumps(ROW),  # one byte order mark is read past, a second is not
     "rows.jsonl:2: invalid JSON: Unexpected UTF-8 BOM (decode using utf-8-sig) at column 1"),
]


@pytest.mark.parametrize(("line", "message"), MALFORMED)
def test_malformed_line_fails_its_item_and_the_rest_run(geo_project: pytest.Pytester, line: str, message: str) -> None:
    geo_project.makefile(".jsonl", rows=jsonl({**ROW, "query_id": "ok1"}, line, {**ROW, "query_id": "ok3"}))
    result = geo_project.runpytest("rows.jsonl", "--geo-mock", "--geo-report", "report.json")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines([message])
    result.stdout.no_fnmatch_line("*Traceback*")
    report = json.loads((geo_project.path / "report.json").read_text())
    assert report["geo"]["overall"]["n"] == 2
    assert [p["line"] for p in report["problems"]] == [2]


def test_invalid_utf8_line(geo_project: pytest.Pytester) -> None:
    good = json.dumps({**ROW, "query_id": "ok"}).encode()
    (geo_project.path / "rows.jsonl").write_bytes(good + b"\n" + b'{"query": "caf\xe9"}\n')
    result = geo_project.runpytest("rows.jsonl", "--geo-mock")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["rows.jsonl:2: invalid UTF-8 at byte 14"])


ERROR_CONFTEST = '''
from pytest_geo.llm.mock import MockClient
from pytest_geo.llm.base import ChatResponse, ModelError

class Flaky(MockClient):
    async def complete(self, request):
        query = request.context.get("query", "")
        if request.role == "ranker" and "travel" in query:
            return ChatResponse(text="I think the first one is best.")
        if request.role == "rewriter" and "vacuum" in query:
            raise ModelError("rewriter model call failed: APIConnectionError: Connection error.")
        return await super().complete(request)

def pytest_geo_make_client(config, settings):
    return Flaky()
'''


def test_row_errors_score_zero_and_fail_with_one_line(geo_project: pytest.Pytester) -> None:
    geo_project.makeconftest(ERROR_CONFTEST)
    result = geo_project.runpytest("data/smoke.jsonl", "--geo-mock", "--geo-report", "report.json")
    result.assert_outcomes(passed=6, failed=2)
    result.stdout.fnmatch_lines([
        "*data/smoke.jsonl:1: error: ranker: no JSON object in the answer: 'I think the first one is best.' (after 3 attempts)",
        "*data/smoke.jsonl:2: error: rewriter model call failed: APIConnectionError: Connection error.",
    ])
    result.stdout.no_fnmatch_line("*Traceback*")
    result.stdout.no_fnmatch_line("*raise *")
    report = json.loads((geo_project.path / "report.json").read_text())
    overall = report["geo"]["overall"]
    assert overall["n"] == 8
    assert overall["avg_rank_improvement"] == pytest.approx(12 / 8)
    assert overall["win_rate"] == pytest.approx(6 / 8)
    failed = {r["query_id"]: r for r in report["rows"] if r["error"]}
    assert set(failed) == {"q1", "q2"}
    assert failed["q2"]["score"] == 0.0
    assert failed["q2"]["feedback"].startswith("error: rewriter model call failed")
    assert result.ret == pytest.ExitCode.TESTS_FAILED


def test_json_report_holds_aggregates_and_rows(geo_project: pytest.Pytester) -> None:
    result = geo_project.runpytest("data/smoke.jsonl", "--geo-mock", "-k", "q1 or q3", "--geo-report", "out/r.json")
    result.assert_outcomes(passed=2, deselected=6)
    report = json.loads((geo_project.path / "out" / "r.json").read_text())
    assert report["geo"]["datasets"]["data/smoke.jsonl"] == {
        "n": 2, "avg_rank_improvement": 2.0, "win_rate": 1.0, "stderr_rank_improvement": 0.0,
    }
    row = report["rows"][0]
    assert {k: row[k] for k in ("query_id", "target_id", "rank_before", "rank_after", "rank_improvement", "error")} == {
        "query_id": "q1", "target_id": "p1", "rank_before": 3, "rank_after": 1, "rank_improvement": 2, "error": None,
    }
    assert row["rewritten_description"] == (  # the E-GEO harness's mock rewrite
        "Best for buyers who want a clear, reliable choice. 13-inch ultrabook, 980g, 16GB RAM, 512GB SSD. "
        "Key specs are easy to scan, with differentiated value over typical alternatives."
    )
    assert row["feedback"] == "rank 3 -> 1"


def test_missing_target_is_chosen_by_seed(geo_project: pytest.Pytester) -> None:
    row = {k: v for k, v in ROW.items() if k != "target_id"}
    geo_project.makefile(".jsonl", rows=jsonl(*[{**row, "query_id": f"r{i}", "query": f"shoes {i}"} for i in range(12)]))

    def targets(*args: str) -> list[str]:
        geo_project.runpytest("rows.jsonl", "--geo-mock", "--geo-report", "r.json", *args)
        return [r["target_id"] for r in json.loads((geo_project.path / "r.json").read_text())["rows"]]

    first = targets()
    assert first == targets()
    assert len(set(first)) > 1
    assert targets("--geo-seed", "99") != first


def test_egeo_style_prompts_directory_works_unchanged(geo_project: pytest.Pytester) -> None:
    other = geo_project.path / "egeo_prompts"
    other.mkdir()
    (other / "ranker_system.txt").write_text('Rank products. Reply {"ordered_ids": [...]}.')
    (other / "ranker_user.txt").write_text("Query: {{query}}\nProducts:\n{{candidates}}")
    (other / "rewriter_system.txt").write_text('Rewrite. Reply {"rewritten_description": "..."}.')
    (other / "rewriter_user.txt").write_text("{{title}}: {{description}} (for {{query}})")
    result = geo_project.runpytest("data/smoke.jsonl", "--geo-mock", "--geo-prompts", "egeo_prompts")
    result.assert_outcomes(passed=8)


def test_broken_prompts_directory_stops_at_start(geo_project: pytest.Pytester) -> None:
    prompt = geo_project.path / "prompts" / "rewriter_user.txt"
    prompt.write_text("Rewrite {{title}} please.")
    result = geo_project.runpytest("data/smoke.jsonl", "--geo-mock")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: *prompts/rewriter_user.txt: missing placeholder {{description}}*"])


def test_bad_option_values_are_usage_errors(geo_project: pytest.Pytester) -> None:
    result = geo_project.runpytest("--geo-concurrency", "0")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--geo-concurrency*must be at least 1*"])
    geo_project.makeini("[pytest]\ngeo_seed = abc\n")
    result = geo_project.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: ini option geo_seed: 'abc' is not a whole number"])


def test_prompts_directory_from_ini(geo_project: pytest.Pytester) -> None:
    (geo_project.path / "prompts").rename(geo_project.path / "my_prompts")
    geo_project.makeini("[pytest]\ngeo_prompts = my_prompts\n")
    result = geo_project.runpytest("data/smoke.jsonl", "--geo-mock")
    result.assert_outcomes(passed=8)
    result.stdout.fnmatch_lines([f"geo: model mock, prompts {geo_project.path / 'my_prompts'}, seed 7"])
    geo_project.makeini("[pytest]\ngeo_prompts = missing\n")  # named, so never replaced by the defaults
    result = geo_project.runpytest("data/smoke.jsonl", "--geo-mock")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: *missing: prompts directory not found"])


REPORTS_CONFTEST = '''
import json
import pytest

SEEN = []

@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    record = getattr(report, "geo_record", None)
    SEEN.append([report.nodeid, report.when, report.outcome, record and record["query_id"],
                 getattr(item, "geo_record", "unset")])
    return report

def pytest_sessionfinish(session):
    (session.config.rootpath / "seen.json").write_text(json.dumps(SEEN))
'''


def test_a_rows_call_report_carries_its_record_and_other_reports_are_pytests(geo_project: pytest.Pytester) -> None:
    """The record is on a GEO item's call report (pytest-geo's makereport wraps pytest's)
    where another plugin's wrapper reads it, the item no longer holds it; setup and
    teardown reports, and a plain test's, are pytest's own."""
    geo_project.makeconftest(REPORTS_CONFTEST)
    geo_project.makepyfile(test_plain="def test_ok():\n    pass\n\ndef test_broken():\n    assert 0\n")
    result = geo_project.runpytest("data/smoke.jsonl", "test_plain.py", "--geo-mock", "-k", "q1 or q2 or plain",
                                   "-p", "no:cacheprovider")
    result.assert_outcomes(passed=3, failed=1)
    seen = json.loads((geo_project.path / "seen.json").read_text())
    assert [s for s in seen if s[1] == "call"] == [
        ["data/smoke.jsonl::q1", "call", "passed", "q1", None],
        ["data/smoke.jsonl::q2", "call", "passed", "q2", None],
        ["test_plain.py::test_ok", "call", "passed", None, "unset"],
        ["test_plain.py::test_broken", "call", "failed", None, "unset"],
    ]
    assert {(s[1], s[2], s[3]) for s in seen if s[1] != "call"} == {("setup", "passed", None),
                                                                     ("teardown", "passed", None)}


PLAIN_MAKEREPORT_CONFTEST = '''
def pytest_runtest_makereport(item, call):
    if call.when == "call":
        item.user_properties.append(("seen_by", "conftest"))
'''


def test_another_plugins_plain_makereport_still_runs_for_a_rows_report(geo_project: pytest.Pytester) -> None:
    """pytest-geo adds its record by wrapping the report pytest makes, so another plugin's
    plain (non-wrapper) makereport, which a report returned first would silence, still runs
    for a GEO row."""
    geo_project.makeconftest(PLAIN_MAKEREPORT_CONFTEST)
    result = geo_project.runpytest("data/smoke.jsonl", "--geo-mock", "-k", "q1", "-p", "no:cacheprovider",
                                   "--junitxml", "junit.xml")
    result.assert_outcomes(passed=1)
    junit = (geo_project.path / "junit.xml").read_text()
    assert '<property name="seen_by" value="conftest" />' in junit
