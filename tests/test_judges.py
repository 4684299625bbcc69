"""--geo-judge: a panel of judges, each ranking every row before and after its rewrite
(one rewrite per variant, shared by the judges), per-judge, panel and agreement figures.

The fake server ranks the usual way for every model except those whose name holds
"reversed", which see everything the other way round: with `geo_rows` the target goes
from 3rd to 1st for a usual judge (+2) and from 1st to 3rd for a reversed one (-2)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from fake_openai import FakeOpenAI
from test_html_flags import tables_of

from conftest import DUMMY_KEY, ONE_PROCESS_AND_TWO_WORKERS, PROMPTS, GeoProject, egeo_workdir
from pytest_geo.cli import main

# The fake server's rewriter returns the description unchanged for this template.
KEEP_TEMPLATE_TEXT = "KEEP it as it is.\nTitle: {{title}}\nOriginal description: {{description}}\n"
SIGNAL_TEMPLATE_TEXT = "Query: {{query}}\nTitle: {{title}}\nOriginal description: {{description}}\nRewrite it.\n"


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


@pytest.mark.plugin
def test_three_judges_make_j_plus_1_plus_j_calls_a_row_and_a_rerun_none(served_project: GeoProject) -> None:
    served_project.dataset(3)
    args = ("rows.jsonl", "--geo-judge", "a=m-a", "--geo-judge", "b=m-b", "--geo-judge", "c=m-c")
    served_project.run(*args).assert_outcomes(passed=3)
    assert calls_by_model(served_project) == {("m-a", "rank"): 6, ("m-b", "rank"): 6, ("m-c", "rank"): 6,
                                              ("gpt-4o-mini", "rewrite"): 3}
    served_project.server.reset()
    served_project.run(*args).assert_outcomes(passed=3)
    assert served_project.server.requests == []  # every answer from the cache


@pytest.mark.plugin
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


@pytest.mark.plugin
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
    assert '"judge":"b"' in html  # each call says whose it is


@pytest.mark.plugin
def test_a_variants_rewriter_model_without_judges(served_project: GeoProject) -> None:
    served_project.dataset(2)
    (served_project.pytester.path / "keep.txt").write_text(KEEP_TEMPLATE_TEXT, encoding="utf-8")
    served_project.pytester.makeini("[pytest]\ngeo_variants =\n    x = keep.txt\n    y = keep.txt@m2\n")
    served_project.run("rows.jsonl", "--geo-no-cache").assert_outcomes(passed=4)
    assert calls_by_model(served_project) == {("gpt-4o-mini", "rank"): 6, ("gpt-4o-mini", "rewrite"): 2,
                                              ("m2", "rewrite"): 2}


@pytest.mark.plugin
def test_a_judges_error_leaves_its_cell_empty_and_fails_the_row_naming_it(served_project: GeoProject) -> None:
    served_project.dataset(2)
    served_project.server.fault_for = lambda body: "500" if body["model"] == "m-bad" else None
    result = served_project.run("rows.jsonl", "--geo-judge", "a=m-a", "--geo-judge", "bad=m-bad",
                                "--geo-report", "r.json", "--geo-max-retries", "0")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(["*rows.jsonl:1: error: judge bad: *"])
    data = report(served_project)
    cells = judges_of(data)["rows.jsonl::r0"]
    assert cells["a"]["rank_improvement"] == 2 and cells["a"]["error"] is None
    assert (cells["bad"]["rank_before"], cells["bad"]["rank_after"], cells["bad"]["rank_improvement"]) == (
        None, None, None)
    assert "500" in cells["bad"]["error"]
    (suite,) = data["suites"]
    assert suite["judges"]["bad"]["n"] == 0 and suite["judges"]["a"]["n"] == 2
    assert suite["panel"] == {"n": 2, "avg_rank_improvement": 2.0, "win_rate": 1.0, "stderr_rank_improvement": 0.0}
    assert suite["agreement"]["direction_rows"] == 0 and suite["agreement"]["direction_agreement"] is None


@pytest.mark.plugin
def test_min_score_holds_the_panel_and_one_judge_with_suite_at_judge(served_project: GeoProject) -> None:
    served_project.dataset(2)
    judges = ("--geo-judge", "a=m-a", "--geo-judge", "b=m-b-reversed", "--geo-judge", "c=m-c")
    served_project.run("rows.jsonl", *judges, "--geo-min-score", "rows.jsonl=0.6").assert_outcomes(passed=2)
    result = served_project.run("rows.jsonl", *judges, "--geo-min-score", "rows.jsonl=0.7",
                                "--geo-min-score", "rows.jsonl@b=-1")
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines(["*rows.jsonl::threshold*panel score 0.6667 < 0.7000*",
                                 "*rows.jsonl::threshold@b*judge b score -2.0000 < -1.0000*"])
    result = served_project.run("rows.jsonl", *judges, "--geo-min-score", "rows.jsonl@zz=0")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--geo-min-score: 'rows.jsonl@zz': no judge named 'zz' (judges: a, b, c)*"])


@pytest.mark.plugin
def test_a_judge_in_a_panel_ranks_as_it_does_alone(served_project: GeoProject) -> None:
    """The panel changes nothing about how one judge is asked: the same requests, the
    same ranks per row as in a run of its own."""
    served_project.dataset(3)
    served_project.run("rows.jsonl", "--geo-judge", "a=m-a", "--geo-judge", "b=m-b-reversed", "--geo-no-cache",
                       "--geo-report", "panel.json").assert_outcomes(passed=3)
    in_panel = [json.dumps(r["body"], sort_keys=True) for r in served_project.server.requests
                if r["body"]["model"] == "m-b-reversed"]
    served_project.server.reset()
    served_project.run("rows.jsonl", "--geo-judge", "b=m-b-reversed", "--geo-no-cache",
                       "--geo-report", "alone.json").assert_outcomes(passed=3)
    alone = [json.dumps(r["body"], sort_keys=True) for r in served_project.server.requests
             if r["body"]["model"] == "m-b-reversed"]
    assert len(in_panel) == 6 and sorted(in_panel) == sorted(alone)
    panel, single = judges_of(report(served_project, "panel.json")), judges_of(report(served_project, "alone.json"))
    assert {row: cells["b"] for row, cells in panel.items()} == {row: cells["b"] for row, cells in single.items()}
    assert single["rows.jsonl::r2"]["b"]["rank_improvement"] == -2


@pytest.mark.plugin
def test_judges_with_repeats_average_each_judge_over_the_orders(served_project: GeoProject) -> None:
    served_project.dataset(2)
    result = served_project.run("rows.jsonl", "--geo-judge", "a=m-a", "--geo-judge", "b=m-b-reversed",
                                "--geo-repeats", "2", "--geo-no-cache", "--geo-report", "r.json")
    result.assert_outcomes(passed=2)
    assert len(served_project.server.requests) == 2 * 2 * (2 + 1 + 2)
    data = report(served_project)
    cells = judges_of(data)["rows.jsonl::r0"]
    assert (cells["a"]["rank_improvement"], cells["b"]["rank_improvement"]) == (2.0, -2.0)
    assert [sorted(run["judges"]) for run in data["rows"][0]["repeats"]] == [["a", "b"], ["a", "b"]]
    assert data["suites"][0]["panel"]["avg_rank_improvement"] == 0.0


@pytest.mark.plugin
def test_judges_against_a_baseline(served_project: GeoProject) -> None:
    served_project.dataset(3)
    judges = ("--geo-judge", "a=m-a", "--geo-judge", "b=m-b")
    served_project.run("rows.jsonl", *judges, "--geo-report", "base.json").assert_outcomes(passed=3)
    result = served_project.run("rows.jsonl", *judges, "--geo-baseline", "base.json", "--geo-report", "r.json")
    result.assert_outcomes(passed=3)
    (compared,) = report(served_project)["baseline"]["suites"]
    assert compared["paired"]["n"] == 3 and compared["paired"]["mean_diff"] == 0.0
    result = served_project.run("rows.jsonl", "--geo-judge", "a=m-a", "--geo-judge", "b=m-c",
                                "--geo-baseline", "base.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*was made with another model (judges: a=m-a, b=m-b in the baseline, "
                                 "a=m-a, b=m-c now)*"])
    served_project.run("rows.jsonl", "--geo-judge", "a=m-a", "--geo-judge", "b=m-c", "--geo-baseline", "base.json",
                       "--geo-baseline-force").assert_outcomes(passed=3)


@pytest.mark.plugin
def test_judges_with_a_token_budget_stop_within_it(served_project: GeoProject) -> None:
    """Each call reserves its worst case (its prompt and the 4,096-token cap, about 5,400
    tokens) and a row spends about 1,400: the budget stops the run after two rows, and
    the rows it left are skipped, never scored."""
    tokens = 8000
    result = served_project.run(str(served_project.dataset(8)), "--geo-judge", "a=m-a", "--geo-judge", "b=m-b",
                                "--geo-concurrency", "1", "--geo-budget-tokens", str(tokens), "--geo-report", "r.json")
    outcomes = result.parseoutcomes()
    assert outcomes == {"passed": 2, "skipped": 6, "failed": 1}  # the failure: pytest-geo::budget
    billed = served_project.server.billed
    assert billed["prompt_tokens"] + billed["completion_tokens"] <= tokens
    result.stdout.fnmatch_lines(["*budget reached*"])
    assert all(set(row["judges"]) == {"a", "b"} for row in report(served_project)["rows"])
    assert report(served_project)["budget"]["reached"]


@pytest.mark.plugin
def test_judges_with_sequential_variants(served_project: GeoProject) -> None:
    served_project.dataset(6)
    (served_project.pytester.path / "keep.txt").write_text(KEEP_TEMPLATE_TEXT, encoding="utf-8")
    (served_project.pytester.path / "signal.txt").write_text(SIGNAL_TEMPLATE_TEXT, encoding="utf-8")
    result = served_project.run("rows.jsonl", "--geo-judge", "a=m-a", "--geo-judge", "b=m-b",
                                "--geo-variant", "move=signal.txt", "--geo-variant", "keep=keep.txt",
                                "--geo-sequential", "--geo-report", "r.json")
    assert result.ret == pytest.ExitCode.OK
    data = report(served_project)
    assert data["sequential"] and data["variants"][0]["matrix"]["move"]["a"]["mean"] == 2.0
    assert data["variants"][0]["matrix"]["keep"]["panel"]["mean"] == 0.0


@pytest.mark.e2e
def test_egeo_judge_prints_per_judge_panel_and_agreement(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_openai: FakeOpenAI,
        capsys: pytest.CaptureFixture[str]) -> None:
    egeo_workdir(tmp_path, monkeypatch, rows=2)
    code = main(["evaluate", "--dataset", "rows.jsonl", "--prompts", str(PROMPTS), "--base-url", fake_openai.url,
                 "--judge", "a=m-a", "--judge", "b=m-b-reversed", "--no-cache"])
    assert code == 0
    out, err = capsys.readouterr()
    printed = json.loads(out)
    assert printed["judges"] == {
        "a": {"n": 2, "avg_rank_improvement": 2.0, "win_rate": 1.0, "stderr_rank_improvement": 0.0},
        "b": {"n": 2, "avg_rank_improvement": -2.0, "win_rate": 0.0, "stderr_rank_improvement": 0.0}}
    assert printed["panel"] == {"n": 2, "avg_rank_improvement": 0.0, "win_rate": 0.0, "stderr_rank_improvement": 0.0}
    # Rows [2, -2] twice: D_o = 2 * 32 / 4 = 16, D_e = 8 * 16 / 12 = 32/3, alpha = 1 - 1.5
    assert printed["agreement"] == {"krippendorff_alpha": -0.5, "mean_kendall_tau": -1.0,
                                    "direction_agreement": 0.0, "direction_rows": 2}
    assert Counter(r["body"]["model"] for r in fake_openai.requests) == {"m-a": 4, "m-b-reversed": 4,
                                                                          "gpt-4o-mini": 2}
    assert "  judge b: n=2 avg_rank_improvement=-2.0000 win_rate=0.0000 stderr_rank_improvement=0.0000" in err


@pytest.mark.plugin
def test_ini_judges_with_their_own_system_prompt_temperature_and_cap(served_project: GeoProject) -> None:
    served_project.dataset(1)
    system = (served_project.pytester.path / "prompts" / "ranker_system.txt").read_text(encoding="utf-8")
    (served_project.pytester.path / "strict.txt").write_text("A strict judge.\n" + system, encoding="utf-8")
    served_project.pytester.makeini("[pytest]\ngeo_judges =\n    a = m-a\n"
                                    "    b = m-b system=strict.txt temperature=0.5 max_output_tokens=2000\n")
    served_project.run("rows.jsonl", "--geo-no-cache").assert_outcomes(passed=1)
    sent = {(r["body"]["model"], r["body"]["messages"][0]["content"].startswith("A strict judge."),
             r["body"].get("temperature"), r["body"].get("max_tokens")) for r in served_project.server.requests}
    # m-a is a name the price table does not know: the default cap; gpt-4o-mini's (the
    # rewriter) is sized to its answer.
    assert sent == {("m-a", False, 0, 4096), ("m-b", True, 0.5, 2000), ("gpt-4o-mini", False, 0, 290)}


@pytest.mark.plugin
@pytest.mark.parametrize(("flag", "message"), [
    ("a", "*argument --geo-judge: 'a' is not NAME=MODEL*"),
    ("a b=m", "*judge name 'a b' may use only letters*"),
    ("a=m colour=red", "*'colour=red' is not one of system=..., temperature=..., max_output_tokens=...*"),
])
def test_a_bad_judge_is_a_usage_error(served_project: GeoProject, flag: str, message: str) -> None:
    served_project.dataset(1)
    result = served_project.run("rows.jsonl", "--geo-judge", flag)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


@pytest.mark.plugin
def test_a_judge_given_twice_or_a_missing_system_file_is_a_usage_error(served_project: GeoProject) -> None:
    served_project.dataset(1)
    result = served_project.run("rows.jsonl", "--geo-judge", "a=m", "--geo-judge", "a=n")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--geo-judge: judge 'a' is given twice*"])
    result = served_project.run("rows.jsonl", "--geo-judge", "a=m system=nowhere.txt")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*judge a: *nowhere.txt: cannot read the system template*"])


@pytest.mark.xdist
def test_judges_under_xdist_aggregate_on_the_controller(
        pytester: pytest.Pytester, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", DUMMY_KEY)
    project = GeoProject(pytester, fake_openai)
    project.dataset(4)
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "-n", "2", "rows.jsonl", "--geo-base-url", fake_openai.url,
        "--geo-judge", "a=m-a", "--geo-judge", "b=m-b-reversed", "--geo-report", "r.json")
    result.assert_outcomes(passed=4)
    data = report(project)
    assert {name: j["n"] for name, j in data["suites"][0]["judges"].items()} == {"a": 4, "b": 4}
    assert data["suites"][0]["agreement"]["mean_kendall_tau"] == -1.0
    assert len(data["rows"]) == 4 and all(set(row["judges"]) == {"a", "b"} for row in data["rows"])
    result.stdout.fnmatch_lines(["  judge b: n=4 avg_rank_improvement=-2.0000 *"])


@pytest.fixture
def four_servers(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, FakeOpenAI]]:
    """One fake server per endpoint ep1..ep4 (each with its own key variable and latency),
    and the default server."""
    for name in ("OPENAI_BASE_URL", "GEO_EVAL_MOCK", "RANKER_MODEL", "REWRITER_MODEL", "META_MODEL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", DUMMY_KEY)
    made = {"default": FakeOpenAI()}
    for i in range(1, 5):
        monkeypatch.setenv(f"EP{i}_KEY", f"sk-ep{i}-{i}{i}{i}{i}{i}{i}{i}{i}")
        made[f"ep{i}"] = FakeOpenAI(latency=0.005 * i)
    for server in made.values():
        server.start()
    yield made
    for server in made.values():
        server.stop()


def panel_project(pytester: pytest.Pytester, servers: dict[str, FakeOpenAI]) -> None:
    GeoProject(pytester, servers["default"]).dataset(3)
    (pytester.path / "keep.txt").write_text(KEEP_TEMPLATE_TEXT, encoding="utf-8")
    (pytester.path / "signal.txt").write_text(SIGNAL_TEMPLATE_TEXT, encoding="utf-8")
    pytester.makeini("[pytest]\ngeo_endpoints =\n" + "".join(
        f"    ep{i} = {servers[f'ep{i}'].url} EP{i}_KEY\n" for i in range(1, 5)))


PANEL_ARGS = ("rows.jsonl", "--geo-judge", "a=ep1/m", "--geo-judge", "b=ep2/m", "--geo-judge", "c=ep3/m",
              "--geo-variant", "x=keep.txt", "--geo-variant", "y=signal.txt@ep4/m2")


@pytest.mark.plugin
def test_done_when_judges_and_variants_on_four_endpoints(pytester: pytest.Pytester,
                                                         four_servers: dict[str, FakeOpenAI]) -> None:
    """Issue 34's check: J + V + J x V = 3 + 2 + 6 calls a row, each on its own endpoint
    with its own key (no cache: x's rewrite leaves the description as it was, so its
    rank_after asks what rank_before asked, and the cache would answer it); the summary, JSON and HTML show per-judge, panel, agreement and the
    variants x judges matrix."""
    panel_project(pytester, four_servers)
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "-n", "0", *PANEL_ARGS, "--geo-base-url", four_servers["default"].url,
        "--geo-report", "r.json", "--geo-html", "r.html", "--geo-no-cache")
    result.assert_outcomes(passed=6)
    seen = {name: ({r["body"]["model"] for r in s.requests}, {r["headers"].get("authorization") for r in s.requests})
            for name, s in four_servers.items()}
    assert seen == {"ep1": ({"m"}, {"Bearer sk-ep1-11111111"}), "ep2": ({"m"}, {"Bearer sk-ep2-22222222"}),
                    "ep3": ({"m"}, {"Bearer sk-ep3-33333333"}), "ep4": ({"m2"}, {"Bearer sk-ep4-44444444"}),
                    "default": ({"gpt-4o-mini"}, {f"Bearer {DUMMY_KEY}"})}
    calls = {name: len(s.requests) for name, s in four_servers.items()}
    # 3 rows: per judge 1 rank_before + 2 rank_after a row; one rewrite a row per variant
    assert calls == {"ep1": 9, "ep2": 9, "ep3": 9, "ep4": 3, "default": 3}
    data = json.loads((pytester.path / "r.json").read_text(encoding="utf-8"))
    suites = {s["suite"]: s for s in data["suites"]}
    assert suites["rows.jsonl[y]"]["panel"]["avg_rank_improvement"] == 2.0
    assert suites["rows.jsonl[x]"]["judges"]["b"] == {"n": 3, "avg_rank_improvement": 0.0, "win_rate": 0.0,
                                                      "stderr_rank_improvement": 0.0}
    assert suites["rows.jsonl[y]"]["agreement"]["direction_agreement"] == 1.0
    (comparison,) = data["variants"]
    assert comparison["matrix"]["y"]["c"] == {"n": 3, "mean": 2.0, "stderr": 0.0}
    result.stdout.fnmatch_lines(["judges of rows.jsonl[[]y[]]:", "  judge a: n=3 avg_rank_improvement=2.0000 *",
                                 "  panel: n=3 *", "  agreement: *",
                                 "  variants x judges (mean +/- stderr, n): a | b | c | panel"])
    html = (pytester.path / "r.html").read_text(encoding="utf-8")
    assert "<h2>Judges</h2>" in html and "variants x judges: rows.jsonl [train]" in html
    # the header names every endpoint in use, the summary and JSON each one's usage; no key anywhere
    result.stdout.fnmatch_lines(["geo: model judges a=ep1/m b=ep2/m c=ep3/m rewriter=gpt-4o-mini, server 127.0.0.1, "
                                 "endpoint ep1 (127.0.0.1), endpoint ep2 (127.0.0.1), endpoint ep3 (127.0.0.1), "
                                 "endpoint ep4 (127.0.0.1), prompts *"])
    result.stdout.fnmatch_lines(["model usage by endpoint:", "  default: calls=3 cache_hits=0 *",
                                 f"  ep1: calls={calls['ep1']} cache_hits=0 retries=0 errors=0 prompt_tokens=*",
                                 "  ep2: *", "  ep3: *", "  ep4: calls=3 *"])
    by_endpoint = {name: (u["calls"], u["prompt_tokens"] > 0) for name, u in data["endpoint_usage"].items()}
    assert by_endpoint == {name: (n, True) for name, n in calls.items()}
    assert data["endpoint_usage"]["ep4"]["prompt_tokens"] == four_servers["ep4"].billed["prompt_tokens"]
    shown = {row[0]: (row[1], row[5]) for row in tables_of(html).tables["endpoint-usage"]}  # calls, prompt tokens
    assert shown == {name: (str(n), str(data["endpoint_usage"][name]["prompt_tokens"])) for name, n in calls.items()}
    written = result.stdout.str() + (pytester.path / "r.json").read_text() + html
    assert not any(f"sk-ep{i}" in written for i in range(1, 5))


@pytest.mark.plugin
def test_without_endpoints_usage_is_not_shown_per_endpoint(served_project: GeoProject) -> None:
    served_project.dataset(1)
    result = served_project.run("rows.jsonl", "--geo-judge", "a=m-a", "--geo-report", "r.json")
    result.assert_outcomes(passed=1)
    assert "model usage by endpoint" not in result.stdout.str() and "endpoint_usage" not in report(served_project)
    result.stdout.fnmatch_lines(["geo: model judges a=m-a rewriter=gpt-4o-mini, server 127.0.0.1, prompts *"])


@pytest.mark.plugin
def test_one_endpoint_down_fails_only_its_judge(pytester: pytest.Pytester,
                                                four_servers: dict[str, FakeOpenAI]) -> None:
    # In one process: the mid-run case below fails judge b's rows under xdist too.
    panel_project(pytester, four_servers)
    four_servers["ep2"].always = "500"
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "-n", "0", *PANEL_ARGS, "--geo-base-url", four_servers["default"].url,
        "--geo-max-retries", "0", "--geo-report", "r.json", "--geo-no-cache")
    result.assert_outcomes(failed=6)
    result.stdout.fnmatch_lines(["*rows.jsonl:1: error: judge b: *"])
    assert "error: judge a" not in result.stdout.str() and "error: judge c" not in result.stdout.str()
    data = json.loads((pytester.path / "r.json").read_text(encoding="utf-8"))
    for suite in data["suites"]:
        assert {name: j["n"] for name, j in suite["judges"].items()} == {"a": 3, "b": 0, "c": 3}
        assert suite["panel"]["n"] == 3
    assert all(row["judges"]["b"]["rank_improvement"] is None and row["judges"]["a"]["error"] is None
               for row in data["rows"])


@pytest.mark.plugin
def test_a_dollar_budget_needs_a_price_for_every_judge_and_variant_model(served_project: GeoProject) -> None:
    served_project.priced().dataset(1)  # gpt-4o-mini has a price
    (served_project.pytester.path / "keep.txt").write_text(KEEP_TEMPLATE_TEXT, encoding="utf-8")
    result = served_project.run("rows.jsonl", "--geo-budget", "1", "--geo-judge", "a=gpt-4o-mini",
                                "--geo-judge", "b=house-judge")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--geo-budget: no price for the judge b's model house-judge, so its calls cannot "
                                 "be held to a budget in dollars*"])
    result = served_project.run("rows.jsonl", "--geo-budget", "1", "--geo-variant", "x=keep.txt@house-rewriter")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*no price for the variant x's rewriter model house-rewriter*"])


@pytest.mark.plugin
def test_batch_with_judges_goes_through_the_batch_api_where_the_endpoint_offers_it(
        pytester: pytest.Pytester, four_servers: dict[str, FakeOpenAI]) -> None:
    """--geo-batch: the default server and the `openai` endpoint (moved to a fake) offer the
    Batch API, so their judges' calls go in batches; an endpoint of geo_endpoints does not,
    so its judge is asked directly. Each row still makes J + 1 + J calls."""
    GeoProject(pytester, four_servers["default"]).dataset(2)
    pytester.makeini(f"[pytest]\ngeo_endpoints =\n    openai = {four_servers['ep1'].url} EP1_KEY\n"
                     f"    ep2 = {four_servers['ep2'].url} EP2_KEY\n")
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "-n", "0", "rows.jsonl", "--geo-base-url", four_servers["default"].url,
        "--geo-judge", "a=m-a", "--geo-judge", "b=openai/m-b", "--geo-judge", "c=ep2/m-c",
        "--geo-batch", "--geo-cache-dir", "cache", "--geo-report", "r.json")
    result.assert_outcomes(passed=2)

    def batched(server: FakeOpenAI) -> Counter[str]:
        return Counter(str(line["body"]["model"]) for batch in server.batches.created  # type: ignore[index]
                       for line in [json.loads(text) for text in server.batches.files[
                           server.batches.batches[batch].input_file_id].splitlines()])

    assert four_servers["default"].requests == [] and four_servers["ep1"].requests == []
    assert batched(four_servers["default"]) == {"m-a": 4, "gpt-4o-mini": 2}
    assert batched(four_servers["ep1"]) == {"m-b": 4}
    assert four_servers["ep2"].batches.created == []
    assert Counter(r["body"]["model"] for r in four_servers["ep2"].requests) == {"m-c": 4}
    assert {r["headers"]["authorization"] for r in four_servers["ep2"].requests} == {"Bearer sk-ep2-22222222"}
    data = json.loads((pytester.path / "r.json").read_text(encoding="utf-8"))
    assert {name: j["n"] for name, j in data["suites"][0]["judges"].items()} == {"a": 2, "b": 2, "c": 2}
    assert {name: u["batch_calls"] for name, u in data["endpoint_usage"].items()} == {
        "default": 6, "openai": 4, "ep2": 0}


@pytest.mark.parametrize("workers", ONE_PROCESS_AND_TWO_WORKERS)
def test_an_endpoint_that_goes_down_mid_run_fails_only_its_judges_later_rows(
        pytester: pytest.Pytester, four_servers: dict[str, FakeOpenAI], workers: str) -> None:
    """ep2 answers its first 3 calls, then fails every one: b's rows from then on fail
    naming judge b and endpoint ep2; a and c score every row; no other judge is named."""
    panel_project(pytester, four_servers)
    GeoProject(pytester, four_servers["default"]).dataset(6)
    down = four_servers["ep2"]
    down.fault_for = lambda body: "500" if len(down.requests) > 3 else None
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "-n", workers, *PANEL_ARGS, "--geo-base-url", four_servers["default"].url,
        "--geo-max-retries", "0", "--geo-report", "r.json", "--geo-no-cache", "--geo-concurrency", "1")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    out = result.stdout.str()
    result.stdout.fnmatch_lines(["*rows.jsonl:*: error: judge b: *ep2*"])
    assert "error: judge a" not in out and "error: judge c" not in out
    data = json.loads((pytester.path / "r.json").read_text(encoding="utf-8"))
    for suite in data["suites"]:
        assert {name: j["n"] for name, j in suite["judges"].items() if name != "b"} == {"a": 6, "c": 6}
        assert suite["judges"]["b"]["n"] < 6
    # b's 3 answered calls score at least one cell: which variant's depends on the workers' order
    assert sum(suite["judges"]["b"]["n"] for suite in data["suites"]) > 0
    failed = [row for row in data["rows"] if row["judges"]["b"]["error"] is not None]
    assert failed and all(row["judges"]["b"]["rank_improvement"] is None for row in failed)
    assert all(row["judges"][name]["error"] is None for row in data["rows"] for name in ("a", "c"))


@pytest.mark.e2e
def test_egeo_an_endpoint_down_mid_run_fails_only_its_judge(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, four_servers: dict[str, FakeOpenAI],
        capsys: pytest.CaptureFixture[str]) -> None:
    """egeo, as pytest: ep2 answers its first 2 calls and then fails every one; judge b's
    later rows are errors naming b and ep2, a and c score every row, the run exits 1."""
    egeo_workdir(tmp_path, monkeypatch, rows=4)
    down = four_servers["ep2"]
    down.fault_for = lambda body: "500" if len(down.requests) > 2 else None
    endpoints = [arg for i in range(1, 4) for arg in ("--endpoint", f"ep{i}={four_servers[f'ep{i}'].url},EP{i}_KEY")]
    code = main(["evaluate", "--dataset", "rows.jsonl", "--prompts", str(PROMPTS), "--base-url",
                 four_servers["default"].url, *endpoints, "--judge", "a=ep1/m", "--judge", "b=ep2/m",
                 "--judge", "c=ep3/m", "--no-cache", "--max-retries", "0", "--concurrency", "1",
                 "--report", "r.json"])
    out, err = capsys.readouterr()
    assert code == 1
    printed = json.loads(out)
    assert printed["judges"]["a"]["n"] == printed["judges"]["c"]["n"] == 4
    assert 0 < printed["judges"]["b"]["n"] < 4
    assert "judge b: " in err and "ep2" in err
    assert "judge a: ranker" not in err and "judge c: ranker" not in err
    rows = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))["rows"]
    assert all(row["judges"][name]["error"] is None for row in rows for name in ("a", "c"))
    assert [row["judges"]["b"]["error"] is not None for row in rows].count(True) == 4 - printed["judges"]["b"]["n"]


@pytest.mark.plugin
def test_a_judge_on_an_endpoint_gets_its_models_sized_output_cap(
        pytester: pytest.Pytester, four_servers: dict[str, FakeOpenAI]) -> None:
    """`ep1/gpt-4o-mini` is OpenAI's chat model behind a path: its cap is sized to the
    ranking, as the same model's on the default server, not the 4,096 of unknown names."""
    panel_project(pytester, four_servers)
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "-n", "0", "rows.jsonl", "--geo-base-url", four_servers["default"].url,
        "--geo-judge", "a=gpt-4o-mini", "--geo-judge", "b=ep1/gpt-4o-mini", "--geo-no-cache")
    result.assert_outcomes(passed=3)
    default_caps = {r["body"]["max_tokens"] for r in four_servers["default"].requests
                    if "ordered_ids" in json.dumps(r["body"]["messages"])}
    endpoint_caps = {r["body"]["max_tokens"] for r in four_servers["ep1"].requests}
    assert endpoint_caps == default_caps and max(endpoint_caps) < 1000
