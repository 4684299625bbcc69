"""What a new user tripped on (issue 37): a metric's traceback, a row threshold, output
caps sized to the answer, unpriced local servers, per-call latency and tokens, ties,
the split in the header, `egeo optimize`'s budget and cache, and messages that read right."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fake_openai import FakeOpenAI
from test_optimize import make_project
from test_optimize import run as run_optimize

from conftest import GeoProject, copy_prompts, egeo_workdir
from pytest_geo.cli import main


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


@pytest.mark.plugin
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


@pytest.mark.plugin
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


# --- 2. row_threshold: a row scoring below it fails its item ----------------------------------

ROWS = '''
import pytest_geo
s_eval = pytest_geo.suite("s", data={"rows": [(1, 1), (2, 3), (3, 3)]}ROW_THRESHOLD)

@s_eval.metric
def same(rows, expected):
    return rows == expected
'''


@pytest.mark.plugin
def test_a_row_scoring_false_passes_without_row_threshold(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_s=ROWS.replace("ROW_THRESHOLD", ""))
    result = run(pytester)
    result.assert_outcomes(passed=3)
    assert result.ret == 0


@pytest.mark.plugin
def test_a_row_below_the_row_threshold_fails_its_item(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_s=ROWS.replace("ROW_THRESHOLD", ", row_threshold=1"))
    result = run(pytester)
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["s::same train[[]1[]]: scored 0.0000, below the suite's row_threshold 1"])
    assert result.stdout.lines[-2] == "- s::same: 0.6667"


@pytest.mark.plugin
def test_row_threshold_in_a_yaml_suite(pytester: pytest.Pytester) -> None:
    pytester.syspathinsert()
    pytester.makepyfile(procs="def same(rows, expected):\n    return rows == expected\n")
    pytester.makefile(".geo.yaml", s="""
suite: s
data:
  rows:
    - {input: 1, expected: 1}
    - {input: 2, expected: 3}
metric: {function: "procs:same", dataset: rows}
row_threshold: 0.5
""")
    result = run(pytester, "-v")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*s::same train[[]1[]]: scored 0.0000, below the suite's row_threshold 0.5"])


@pytest.mark.plugin
def test_a_row_threshold_that_is_not_a_number_is_a_collection_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_s=ROWS.replace("ROW_THRESHOLD", ", row_threshold=float('nan')"))
    result = run(pytester)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*suite 's': row_threshold must be a finite number, got nan"])


# --- 10. side by side with the E-GEO harness ---------------------------------------------------


@pytest.mark.plugin
def test_one_suite_bound_to_two_names_is_collected_once(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_s=ROWS.replace("ROW_THRESHOLD", "") + "\nalias = s_eval\n")
    collected = run(pytester, "--collect-only", "-q")
    collected.stdout.fnmatch_lines(["test_s.py::s::train[[]0[]]", "test_s.py::s::train[[]1[]]",
                                    "test_s.py::s::train[[]2[]]", "3 tests collected*"])
    result = run(pytester, "--geo-report", "r.json")
    result.assert_outcomes(passed=3)
    (entry,) = json.loads((pytester.path / "r.json").read_text())["suites"]
    assert entry["n"] == 3


@pytest.mark.plugin
def test_one_suite_bound_to_two_names_in_a_conftest_is_collected_once(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(ROWS.replace("ROW_THRESHOLD", "") + "\nalias = s_eval\n")
    run(pytester, "--collect-only", "-q").stdout.fnmatch_lines(["3 tests collected*"])


# --- 9. messages that read right -------------------------------------------------------------


@pytest.mark.plugin
def test_a_misspelt_yaml_key_is_named(pytester: pytest.Pytester) -> None:
    pytester.makefile(".geo.yaml", s="""
suite: s
data:
  rows:
    - {input: 1, expected: 1}
metrics: {builtin: exact_match, dataset: rows}
""")
    result = run(pytester)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*s.geo.yaml: metrics: unknown key (did you mean 'metric'?)"])
    result.stdout.no_fnmatch_line("*required property*")


@pytest.mark.parametrize(("stats", "shape"), [
    ({"mode": "fixed", "limit": 1}, "fixed at 1 row in flight"),
    ({"mode": "fixed", "limit": 2}, "fixed at 2 rows in flight"),
    ({"mode": "auto", "start": 1, "reached": 1, "limit": 1, "maximum": 4}, "auto, the limit stayed at 1 row in flight (bound 4)"),
])
@pytest.mark.unit
def test_one_row_in_flight_is_singular(stats: dict[str, object], shape: str) -> None:
    from pytest_geo.report.concurrency import stats_line

    assert stats_line({"rate_limited": 0, **stats}) == f"concurrency: {shape}; 429 answers seen: 0"


@pytest.mark.e2e
def test_apply_when_the_current_prompt_stays_best_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    project = make_project(tmp_path / "p")
    before = project.working.read_bytes()
    code, _ = run_optimize(monkeypatch, project, "--iters", "1", "--apply")  # the mock's proposals only tie
    captured = capsys.readouterr()
    assert code == 0
    result = json.loads(captured.out)
    assert (result["applied"], result["best"]["iter"]) == (False, 0)
    assert result["hint"] == "The current prompt stayed best; nothing needed applying."
    assert "the current prompt stayed best: nothing to apply" in captured.err
    assert "--apply" not in captured.err + result["hint"]
    assert project.working.read_bytes() == before
    assert captured.err.startswith("optimize: rewriter_user: 8 training rows")  # its progress label


# --- 7. the header says which split ran ------------------------------------------------------

HELD_OUT = '''
import pytest_geo
s_eval = pytest_geo.suite("s", data={"rows": [(1, 1), (2, 2)]}, test_data={"rows": [(3, 3)]})

@s_eval.metric
def same(rows, expected):
    return rows == expected
'''


@pytest.mark.plugin
def test_the_header_says_the_default_split_runs_test_data(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_s=HELD_OUT)
    result = run(pytester)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["geo: *; split test: the test_data of s (their data rows run with "
                                 "--geo-split train or all)"])
    train = run(pytester, "--geo-split", "train")
    train.assert_outcomes(passed=2)
    train.stdout.no_fnmatch_line("*split test*")


# --- 3. output caps sized to the answer --------------------------------------------------------

PRICED = "[pytest]\ngeo_prices =\n    gpt-4o-mini = 0.15, 0.60\n"  # the list price, said for this local server


@pytest.mark.plugin
def test_a_budget_the_full_run_fits_in_runs_every_row(served_project: GeoProject) -> None:
    """10 rows cost about $0.0015 at the fake server; each call used to reserve its
    4,096-token cap ($0.0025 of answer alone), so $0.005 ran only a few rows."""
    served_project.pytester.makeini(PRICED)
    result = served_project.run(str(served_project.dataset(10)), "--geo-budget", "0.005", "--geo-report", "r.json")
    result.assert_outcomes(passed=10)
    caps = [r["body"]["max_tokens"] for r in served_project.server.requests]
    assert len(caps) == 30 and 256 < min(caps) and max(caps) < 1024


@pytest.mark.plugin
def test_a_cap_the_user_sets_is_sent_as_set(served_project: GeoProject) -> None:
    result = served_project.run(str(served_project.dataset(2)), "--geo-max-output-tokens", "3000")
    result.assert_outcomes(passed=2)
    assert {r["body"]["max_tokens"] for r in served_project.server.requests} == {3000}


@pytest.mark.unit
def test_a_reasoning_model_keeps_the_default_cap() -> None:
    from pytest_geo.llm.profiles import sized_cap

    assert sized_cap("gpt-4o-mini", None, 100, 4096) == 356
    assert sized_cap("gpt-4o-mini", None, 10_000, 4096) == 4096
    assert sized_cap("o3-mini", None, 100, 4096) == 4096
    assert sized_cap("gpt-5.1", "high", 100, 4096) == 4096
    assert sized_cap("qwen3-8b", None, 100, 4096) == 4096  # a local model may think aloud in its answer


@pytest.mark.plugin
def test_the_budget_message_names_the_cap_flag_when_the_cap_is_what_blocks(served_project: GeoProject) -> None:
    served_project.pytester.makeini(PRICED)
    result = served_project.run(str(served_project.dataset(2)), "--geo-max-output-tokens", "100000",
                                "--geo-budget", "0.01")
    result.stdout.fnmatch_lines(["*budget reached: a * call to gpt-4o-mini may cost up to $0.06* (its prompt and "
                                 "the 100,000-token output cap), and $0.01000 of $0.01000 is left; the prompt fits, its "
                                 "output cap does not: lower it with --geo-max-output-tokens N*"])


# --- 8. egeo optimize: a budget, a cost line and the answer cache ------------------------------


def optimize_args(url: str, *extra: str) -> list[str]:
    return ["optimize", "--train", "rows.jsonl", "--val", "rows.jsonl", "--prompts", "prompts", "--iters", "1",
            "--base-url", url, *extra]


@pytest.mark.e2e
def test_egeo_optimize_prints_its_cost_and_caches_its_answers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               fake_openai: FakeOpenAI,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    egeo_workdir(tmp_path, monkeypatch, rows=3)
    copy_prompts(tmp_path / "prompts")
    assert main(optimize_args(fake_openai.url)) == 0
    err = capsys.readouterr().err
    assert "model usage:" in err and "\ncost: " in err
    sent = len(fake_openai.requests)
    assert sent > 0 and (tmp_path / ".pytest_cache" / "d" / "geo").is_dir()
    assert main(optimize_args(fake_openai.url)) == 0
    assert len(fake_openai.requests) == sent  # every answer came from the cache
    assert "cache_hits=" in capsys.readouterr().err
    assert main(optimize_args(fake_openai.url, "--no-cache")) == 0
    assert len(fake_openai.requests) >= 2 * sent  # sent again, and without the cache a repeated call is sent twice


@pytest.mark.e2e
def test_egeo_optimize_holds_to_a_budget(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_openai: FakeOpenAI,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    egeo_workdir(tmp_path, monkeypatch, rows=3)
    copy_prompts(tmp_path / "prompts")
    assert main(optimize_args(fake_openai.url, "--budget-tokens", "3000", "--no-cache")) == 1
    err = capsys.readouterr().err
    # a call cut off as the budget ran out is charged as unknown, between the two parts, under load
    assert "budget: " in err and "tokens spent of 3,000" in err and "; budget reached: " in err
    assert sum(fake_openai.billed.values()) <= 3000


# --- 8. egeo evaluate in a project made by egeo init; egeo init's last line ----------------------


@pytest.mark.e2e
def test_egeo_evaluate_runs_the_init_projects_dataset_and_names_its_prompts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["init"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "next: pytest --geo-mock"
    assert main(["evaluate", "--mock"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["n"] == 3
    dataset = tmp_path / "eval" / "datasets" / "example.jsonl"
    assert (f"egeo: dataset {dataset} (from the rank_improvement suite eval/suites/rewriter.geo.yaml); "
            f"prompts {tmp_path / 'prompts'}") in captured.err.splitlines()


@pytest.mark.e2e
def test_egeo_evaluate_reads_geo_datasets_and_geo_prompts_from_the_ini(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    egeo_workdir(tmp_path, monkeypatch, rows=2)
    copy_prompts(tmp_path / "mine")
    (tmp_path / "pytest.ini").write_text("[pytest]\ngeo_datasets = rows.jsonl\ngeo_prompts = mine\n")
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")  # found as pytest finds it: in a parent too
    assert main(["evaluate", "--mock"]) == 0
    err = capsys.readouterr().err
    assert f"egeo: dataset {tmp_path / 'rows.jsonl'} (from geo_datasets in {tmp_path / 'pytest.ini'}); " \
           f"prompts {tmp_path / 'mine'}" in err.splitlines()


@pytest.mark.e2e
def test_egeo_evaluate_without_a_dataset_anywhere_says_what_it_needs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["evaluate", "--mock"]) == 2
    assert capsys.readouterr().err == ("egeo: error: --dataset is needed: no pytest configuration here, and no "
                                       "YAML suite scores a GEO dataset by rank_improvement\n")


@pytest.mark.e2e
def test_egeo_init_says_to_add_the_lines_when_it_only_printed_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "tox.ini").write_text("[pytest]\naddopts = -q\n")
    monkeypatch.chdir(tmp_path)
    assert main(["init", "."]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "next: add those lines, then pytest --geo-mock"
    assert main(["init", "other"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "next: cd other && pytest --geo-mock"


# --- 6. variants that tie ----------------------------------------------------------------------


@pytest.mark.plugin
def test_variants_that_tie_are_shown_as_ties_and_not_pooled(geo_project: pytest.Pytester) -> None:
    from test_variants import SIGNAL_TEMPLATE

    (geo_project.path / "signal.txt").write_text(SIGNAL_TEMPLATE, encoding="utf-8")
    result = geo_project.runpytest("data/smoke.jsonl", "--geo-mock", "--geo-variant", "plain=signal.txt", "--geo-variant",
                                   "bestfor=signal.txt", "--geo-report", "r.json", "--geo-html", "r.html")
    result.assert_outcomes(passed=16)
    result.stdout.fnmatch_lines([
        "variants of data/smoke.jsonl, best first: plain 2.0000 = bestfor 2.0000",
        "  plain = bestfor (tied): n=8 mean_diff=+0.0000 *(0 better, 0 worse, 8 tied)",
    ])
    result.stdout.no_fnmatch_line("all GEO rows*")  # the same rows twice are not 16 rows
    [pair] = json.loads((geo_project.path / "r.json").read_text())["variants"][0]["pairs"]
    assert pair["tied"] is True
    html = (geo_project.path / "r.html").read_text(encoding="utf-8")
    assert "<td>plain (tied)</td><td>bestfor (tied)</td>" in html
    assert "<th>better</th>" not in html


# --- 5. latency and tokens per call, the row's time in JUnit ------------------------------------


@pytest.mark.plugin
def test_rows_and_transcripts_carry_seconds_and_tokens_and_junit_the_rows_time(served_project: GeoProject) -> None:
    import gzip
    import xml.etree.ElementTree as ET

    served_project.server.latency = 0.1
    result = served_project.run(str(served_project.dataset(2)), "--geo-report", "r.json", "--junitxml", "j.xml")
    result.assert_outcomes(passed=2)
    path = served_project.pytester.path
    rows = json.loads((path / "r.json").read_text())["rows"]
    for row in rows:
        assert row["n_calls"] == 3 and row["prompt_tokens"] > 0 and row["completion_tokens"] > 0
        assert row["model_seconds"] >= 0.3 and row["seconds"] >= 0.2  # rank_before beside the rewrite, then rank_after
        # to the millisecond, and no null written for the threshold a GEO row never has: the report stays small
        assert [len(repr(row[name]).partition(".")[2]) <= 3 for name in ("seconds", "model_seconds")] == [True, True]
        assert "threshold" not in row
    with gzip.open(path / "r.transcripts.jsonl.gz", "rt", encoding="utf-8") as handle:
        lines = [json.loads(line) for line in handle]
    calls = [call for line in lines for call in line["calls"]]
    assert len(calls) == 6 and all(c["seconds"] >= 0.1 and c["prompt_tokens"] > 0 for c in calls)
    assert all(len(repr(c["seconds"]).partition(".")[2]) <= 3 for c in calls)
    assert sum(c["completion_tokens"] for c in calls) == sum(r["completion_tokens"] for r in rows)
    times = [float(case.get("time", "0")) for case in ET.parse(path / "j.xml").getroot().iter("testcase")]
    assert len(times) == 2 and min(times) >= 0.2


@pytest.mark.plugin
@pytest.mark.parametrize("extra", [("--geo-judge", "a=gpt-4o-mini", "--geo-judge", "b=gpt-4o-mini"),
                                   ("--geo-repeats", "2")], ids=["judges", "repeats"])
def test_a_panel_or_repeated_row_records_its_wall_time_for_junit(served_project: GeoProject, extra: tuple[str, ...]) -> None:
    import xml.etree.ElementTree as ET

    served_project.server.latency = 0.1
    result = served_project.run(str(served_project.dataset(1)), *extra, "--geo-report", "r.json", "--junitxml", "j.xml")
    result.assert_outcomes(passed=1)
    path = served_project.pytester.path
    [row] = json.loads((path / "r.json").read_text())["rows"]
    assert row["seconds"] >= 0.2  # two round trips at 0.1 s, as one row without judges or repeats
    [case] = ET.parse(path / "j.xml").getroot().iter("testcase")
    assert float(case.get("time", "0")) >= 0.2


# --- 4. the HTML report's cost line and header --------------------------------------------------


@pytest.mark.plugin
def test_the_html_says_the_mock_costs_nothing(geo_project: pytest.Pytester) -> None:
    geo_project.runpytest("data/smoke.jsonl", "--geo-mock", "--geo-html", "h.html").assert_outcomes(passed=8)
    html = (geo_project.path / "h.html").read_text(encoding="utf-8")
    assert '<p class="meta">total $0: the mock model costs nothing</p>' in html
    assert "no price for" not in html


@pytest.mark.plugin
def test_the_html_header_names_only_the_models_that_ran(served_project: GeoProject) -> None:
    result = served_project.run(str(served_project.dataset(1)), "--geo-html", "h.html")
    result.assert_outcomes(passed=1)
    html = (served_project.pytester.path / "h.html").read_text(encoding="utf-8")
    assert '<p class="meta">ranker=gpt-4o-mini, rewriter=gpt-4o-mini; seed 7;' in html
    assert "optimizer=" not in html
