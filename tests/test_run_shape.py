"""Runs that are not the usual shape still report honestly: partial runs say so (and are
refused as a baseline), empty datasets report n=0, a suite name is declared once."""

from __future__ import annotations

import json
import textwrap
from typing import Any

import pytest

from pytest_geo.settings import DEFAULT_SEED

pytestmark = pytest.mark.plugin

SLOW_ROW_FAILS = '''
import pytest_geo
s_eval = pytest_geo.suite("s", data={"rows": [(i, 0) for i in range(6)]})

@s_eval.metric
def m(rows, expected):
    assert rows != 2, "row 2 fails"
    return 1.0
'''


def read(pytester: pytest.Pytester, name: str) -> dict[str, Any]:
    return json.loads((pytester.path / name).read_text(encoding="utf-8"))


@pytest.mark.parametrize("stop", [["-x"], ["--maxfail", "1"]])
def test_interrupted_run_writes_a_partial_report(pytester: pytest.Pytester, stop: list[str]) -> None:
    pytester.makepyfile(test_s=SLOW_ROW_FAILS)
    result = pytester.runpytest("-p", "no:cacheprovider", "--geo-report", "r.json", "--geo-html", "r.html", *stop)
    result.assert_outcomes(passed=2, failed=1)
    report = read(pytester, "r.json")
    assert report["complete"] is False and report["not_run"] == 3
    result.stdout.fnmatch_lines(["partial run: 3 of 6 selected rows did not run; the scores cover only the rows that ran"])
    page = (pytester.path / "r.html").read_text(encoding="utf-8")
    assert '<p class="banner partial" role="alert">Partial run: 3 selected rows did not run' in page
    from test_reporting import validate

    validate(report)
    refused = pytester.runpytest("-p", "no:cacheprovider", "--geo-baseline", "r.json")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.stderr.fnmatch_lines(["ERROR: --geo-baseline: r.json is a partial run (3 selected rows did not run);*"])


def test_complete_run_and_deselected_rows(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_s=SLOW_ROW_FAILS.replace('assert rows != 2, "row 2 fails"', "pass"))
    pytester.runpytest("-p", "no:cacheprovider", "--geo-report", "r.json", "-k", "not train[1]")
    report = read(pytester, "r.json")
    assert report["complete"] is True and report["not_run"] == 0  # deselected rows were never selected
    page_run = pytester.runpytest("-p", "no:cacheprovider", "--geo-html", "r.html")
    assert page_run.ret == 0 and "banner" not in (pytester.path / "r.html").read_text().split("</style>")[1]


@pytest.mark.parametrize("content", [b"", b"\n\n  \n", b"\xef\xbb\xbf"], ids=["empty", "blank", "bom"])
def test_empty_dataset_reports_n_zero(geo_project: pytest.Pytester, content: bytes) -> None:
    (geo_project.path / "empty.jsonl").write_bytes(content)
    result = geo_project.runpytest("empty.jsonl", "--geo-mock", "--geo-report", "r.json", "--geo-html", "r.html")
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([
        "empty.jsonl: n=0 avg_rank_improvement=0.0000 *",
        "Evals:",
        "- empty.jsonl::rank_improvement: 0.0000 | no examples",
    ])
    report = read(geo_project, "r.json")
    assert [(s["suite"], s["n"], s["score"], s["feedback"]) for s in report["suites"]] == [
        ("empty.jsonl", 0, 0.0, "no examples")]
    assert (geo_project.path / "r.html").is_file()
    below = geo_project.runpytest("empty.jsonl", "--geo-mock", "--geo-min-score", "empty.jsonl=0.5")
    assert below.ret == pytest.ExitCode.TESTS_FAILED  # 0.0 is below any positive threshold


def test_two_files_declaring_one_suite_is_a_collection_error(geo_project: pytest.Pytester) -> None:
    body = """
        suite: rewriter
        data:
          products: data/smoke.jsonl
        metric: {builtin: rank_improvement, dataset: products}
        threshold: THRESHOLD
    """
    geo_project.makefile(".geo.yaml", a=textwrap.dedent(body.replace("THRESHOLD", "1.0")))
    geo_project.makefile(".geo.yaml", b=textwrap.dedent(body.replace("THRESHOLD", "3.0")))
    result = geo_project.runpytest("--geo-mock")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["b.geo.yaml: suite 'rewriter' is already declared in a.geo.yaml"])


def test_python_and_yaml_suite_with_one_name(geo_project: pytest.Pytester) -> None:
    geo_project.makefile(".geo.yaml", a=textwrap.dedent("""
        suite: s
        procedure: builtins:str
        data:
          rows: [{input: 1, expected: 1}]
        metric: {builtin: exact_match, dataset: rows}
    """))
    geo_project.makepyfile(test_s=SLOW_ROW_FAILS)
    result = geo_project.runpytest("a.geo.yaml", "test_s.py")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["test_s.py: suite 's' is already declared in a.geo.yaml"])


MOCK_AS_CLIENT = '''
from pytest_geo.llm.mock import MockClient

def pytest_geo_make_client(config, settings):
    return MockClient()  # a "real" run (no --geo-mock) answered offline
'''


def test_baseline_from_the_mock_is_refused_for_a_real_run(geo_project: pytest.Pytester,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    geo_project.runpytest("data/smoke.jsonl", "--geo-mock", "--geo-report", "mock.json").assert_outcomes(passed=8)
    geo_project.makeconftest(MOCK_AS_CLIENT)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-0000")
    refused = geo_project.runpytest("data/smoke.jsonl", "--geo-baseline", "mock.json")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.stderr.fnmatch_lines(["ERROR: --geo-baseline: mock.json was made with another model (model: the mock in"
                                  " the baseline, a real model now); * (--geo-baseline-force compares anyway)"])
    forced = geo_project.runpytest("data/smoke.jsonl", "--geo-baseline", "mock.json", "--geo-baseline-force",
                                   "--geo-report", "r.json")
    assert forced.ret == pytest.ExitCode.OK
    forced.stdout.fnmatch_lines(["baseline mock.json:", "  differs: model: the mock in the baseline, a real model now"])
    assert read(geo_project, "r.json")["baseline"]["differences"][0].startswith("model: the mock")


def test_baseline_with_other_models_is_refused_and_other_settings_are_named(
        geo_project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    geo_project.makeconftest(MOCK_AS_CLIENT)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-0000")
    geo_project.runpytest("data/smoke.jsonl", "--geo-ranker-model", "rk-1", "--geo-report", "base.json")
    refused = geo_project.runpytest("data/smoke.jsonl", "--geo-ranker-model", "rk-2", "--geo-baseline", "base.json")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.stderr.fnmatch_lines(["*(ranker model: rk-1 in the baseline, rk-2 now)*"])
    prompt = geo_project.path / "prompts" / "rewriter_user.txt"
    prompt.write_text(prompt.read_text() + "\nBe concise.\n")
    result = geo_project.runpytest("data/smoke.jsonl", "--geo-ranker-model", "rk-1", "--geo-baseline", "base.json",
                                   "--geo-seed", "99", "--geo-repeats", "2", "--geo-report", "r.json")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines([
        "baseline base.json:",
        "  differs: prompt rewriter_user.txt: changed",
        f"  differs: seed: {DEFAULT_SEED} in the baseline, 99 now",
        "  differs: repeats: 1 in the baseline, 2 now",
    ])
    assert read(geo_project, "r.json")["baseline"]["differences"] == [
        "prompt rewriter_user.txt: changed", f"seed: {DEFAULT_SEED} in the baseline, 99 now",
        "repeats: 1 in the baseline, 2 now"]
