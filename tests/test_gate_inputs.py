"""What a gate is given must be able to fail: `--geo-min-score` names a collected suite
(by name or dataset path), thresholds and metric values are finite numbers."""

from __future__ import annotations

import json
import textwrap

import pytest

from conftest import ONE_PROCESS_AND_TWO_WORKERS

SUITE = '''
import pytest_geo
s_eval = pytest_geo.suite("sentiment", data={"rows": [(i, 0) for i in range(4)]}, threshold=THRESHOLD)

@s_eval.metric
def m(rows, expected):
    return VALUE
'''


def suite(threshold: str = "None", value: str = "1.0") -> str:
    return SUITE.replace("THRESHOLD", threshold).replace("VALUE", value)


@pytest.mark.parametrize(("workers", "name"), [
    *(pytest.param("0", name, marks=pytest.mark.plugin)
      for name in ("sentimnt", "geo_smoke", "smoke.jsonl", "./data/smoke.json")),
    pytest.param("2", "geo_smoke", marks=pytest.mark.xdist),
])
def test_unknown_min_score_name_is_a_usage_error(geo_project: pytest.Pytester, workers: str, name: str) -> None:
    pytest.importorskip("xdist")
    geo_project.makepyfile(test_s=suite())
    result = geo_project.runpytest("-n", workers, "-p", "no:cacheprovider", "data/smoke.jsonl", "test_s.py",
                                   "--geo-mock", "--geo-min-score", f"{name}=3")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([
        f"ERROR: --geo-min-score: no selected suite named {name!r} (suites: data/smoke.jsonl, sentiment)"])


@pytest.mark.parametrize("workers", ONE_PROCESS_AND_TWO_WORKERS)
def test_dataset_suite_named_by_its_path_as_given(geo_project: pytest.Pytester, workers: str) -> None:
    pytest.importorskip("xdist")
    sub = geo_project.mkdir("sub")
    absolute = str(geo_project.path / "data" / "smoke.jsonl")
    cases = [(geo_project.path, "data/smoke.jsonl"), (geo_project.path, "./data/smoke.jsonl"),
             (sub, "../data/smoke.jsonl"), (sub, absolute)]
    for cwd, name in cases if workers == "0" else cases[2:3]:
        with pytest.MonkeyPatch.context() as mp:
            mp.chdir(cwd)
            result = geo_project.runpytest("-n", workers, "-p", "no:cacheprovider", absolute, "--geo-mock",
                                           "--geo-min-score", f"{name}=3")
        assert result.ret == pytest.ExitCode.TESTS_FAILED, (cwd, name)
        result.stdout.fnmatch_lines(["FAILED *data/smoke.jsonl::threshold - score 2.0000 < 3.0000*"])


@pytest.mark.plugin
def test_min_score_for_a_suite_with_no_rows_selected(geo_project: pytest.Pytester) -> None:
    geo_project.makepyfile(test_s=suite())
    result = geo_project.runpytest("test_s.py", "--geo-min-score", "data/smoke.jsonl=1")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*no selected suite named 'data/smoke.jsonl' (suites: sentiment)"])


@pytest.mark.plugin
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "NaN"])
def test_non_finite_min_score_is_a_usage_error(geo_project: pytest.Pytester, value: str) -> None:
    result = geo_project.runpytest("--geo-min-score", f"s={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*--geo-min-score*'s={value}': '{value}' is not a finite number*"])


@pytest.mark.plugin
def test_non_finite_threshold_is_a_collection_error_naming_the_file(pytester: pytest.Pytester) -> None:
    pytester.makefile(".geo.yaml", bad=textwrap.dedent("""
        suite: square
        data:
          rows: [{input: 2, expected: 4}]
        metric: {function: "builtins:abs", dataset: rows}
        threshold: .nan
    """))
    pytester.makepyfile(test_py=suite(threshold="float('inf')"))
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines([
        "*bad.geo.yaml: suite 'square': threshold must be a finite number, got nan*",
        "*test_py.py: suite 'sentiment': threshold must be a finite number, got inf*",
    ], consecutive=False)


@pytest.mark.plugin
@pytest.mark.parametrize("value", ["float('nan')", "float('inf')", "(float('nan'), 'feedback')"])
def test_metric_returning_nan_scores_zero_with_an_error(pytester: pytest.Pytester, value: str) -> None:
    pytester.makepyfile(test_s=suite(threshold="0.5", value=value))
    result = pytester.runpytest("-p", "no:cacheprovider", "--geo-report", "r.json")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(failed=5)  # the four rows and the threshold gate
    text = (pytester.path / "r.json").read_text()
    report = json.loads(text, parse_constant=lambda name: pytest.fail(f"bare {name} in the report"))
    assert report["suites"][0]["score"] == 0.0
    word = "nan" if "nan" in value else "inf"
    assert {r["feedback"] for r in report["rows"]} == {f"error: metric returned {word}"}
    from test_reporting import validate

    validate(report)
