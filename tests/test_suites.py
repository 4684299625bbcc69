"""Declared eval suites end to end (Kedi semantics), with pytester."""

from __future__ import annotations

import json
import shutil
import textwrap
import time
from pathlib import Path

import pytest

from conftest import no_traceback

SUITE = '''
import pytest_geo

def answer(question):
    return {"What is 2 + 2?": "4", "Capital of France?": "Paris"}.get(question, "?")

answer_eval = pytest_geo.suite(
    "answer",
    data={"questions": [("What is 2 + 2?", {"answer": "4"}), ("Capital of France?", {"answer": "Paris"})]},
    test_data={"questions": [("What is 2 + 2?", {"answer": "4"}), ("Capital of Peru?", {"answer": "Lima"})]},
    markers=["slow"],
)

@answer_eval.metric
def exact_match(questions, expected):
    return answer(questions).strip() == expected["answer"]
'''


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-p", "no:cacheprovider", *args)


@pytest.mark.plugin
def test_python_suite_scores_test_data_by_default(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_answer=SUITE)
    result = run(pytester, "-v")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*test_answer.py::answer::test[[]0[]] PASSED*", "*answer::test[[]1[]] PASSED*"])
    assert result.stdout.lines[-2] == "- answer::exact_match: 0.5000"
    assert result.stdout.lines[-3] == "Evals:"


@pytest.mark.plugin
def test_split_train_and_all(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_answer=SUITE)
    result = run(pytester, "--geo-split", "train")
    result.stdout.fnmatch_lines(["- answer::exact_match: 1.0000"])
    result = run(pytester, "--geo-split", "all")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["- answer::exact_match [[]train[]]: 1.0000", "- answer::exact_match [[]test[]]: 0.5000"])


@pytest.mark.plugin
def test_falls_back_to_data_without_test_data(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_answer=SUITE.replace('    test_data={"questions": [("What is 2 + 2?", {"answer": "4"}), ("Capital of Peru?", {"answer": "Lima"})]},\n', ""))
    result = run(pytester, "--collect-only", "-q")
    result.stdout.fnmatch_lines(["test_answer.py::answer::train[[]0[]]", "test_answer.py::answer::train[[]1[]]"])


@pytest.mark.plugin
def test_suite_in_conftest(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(SUITE)
    result = run(pytester, "--collect-only", "-q")
    result.stdout.fnmatch_lines(["conftest.py::answer::test[[]0[]]"])
    run(pytester).stdout.fnmatch_lines(["- answer::exact_match: 0.5000"])


@pytest.mark.plugin
@pytest.mark.parametrize(
    ("returns", "line"),
    [
        ("True", "- s::m: 1.0000"),
        ("0.25", "- s::m: 0.2500"),
        ("3", "- s::m: 3.0000"),
        ("(0.5, 'half right')", "- s::m: 0.5000 | half right (x2)"),
        ("(1, 42)", "- s::m: 1.0000 | 42 (x2)"),
    ],
)
def test_metric_return_normalisation(pytester: pytest.Pytester, returns: str, line: str) -> None:
    pytester.makepyfile(test_s=f'''
import pytest_geo
s_eval = pytest_geo.suite("s", data={{"rows": [(1, 1), (2, 2)]}})

@s_eval.metric
def m(rows, expected):
    return {returns}
''')
    result = run(pytester)
    result.assert_outcomes(passed=2)
    assert result.stdout.lines[-2] == line


@pytest.mark.plugin
def test_metric_that_raises_scores_zero_and_the_rest_run(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_s='''
import pytest_geo
s_eval = pytest_geo.suite("s", data={"rows": [(1, 1), (0, 1), (2, 2)]})

@s_eval.metric
def ratio(rows, expected):
    return 1 / rows
''')
    result = run(pytester, "--geo-report", "r.json")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines([">       return 1 / rows", "E       ZeroDivisionError: division by zero",
                                 "test_s.py:6: ZeroDivisionError"])
    assert result.stdout.lines[-2] == "- s::ratio: 0.5000 | error: ZeroDivisionError: division by zero"
    report = json.loads((pytester.path / "r.json").read_text())
    (entry,) = report["suites"]
    assert (entry["n"], entry["score"]) == (3, 0.5)
    assert [r["score"] for r in report["rows"]] == [1.0, 0.0, 0.5]
    assert report["rows"][1]["feedback"] == "error: ZeroDivisionError: division by zero"


@pytest.mark.plugin
def test_other_return_values_are_row_errors(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_s='''
import pytest_geo
s_eval = pytest_geo.suite("s", data={"rows": [(1, 1)]})

@s_eval.metric
def m(rows, expected):
    return "yes"
''')
    result = run(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "s::m train[[]0[]]: error: metric returned str 'yes'; expected a bool, a number or (score, feedback)",
    ])


@pytest.mark.plugin
def test_two_metrics_is_an_error_naming_the_suite(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_s=SUITE + "\n@answer_eval.metric\ndef other(questions, expected):\n    return 1\n")
    result = run(pytester)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*suite 'answer' defines 2 metrics (exact_match, other); a suite has exactly one*"])


@pytest.mark.plugin
def test_metric_naming_an_undefined_dataset(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_s=SUITE.replace("def exact_match(questions,", "def exact_match(quizzes,").replace(
        "answer(questions)", "answer(quizzes)"))
    result = run(pytester)
    assert result.ret != 0
    result.stdout.fnmatch_lines([
        "*suite 'answer': metric 'exact_match' names dataset 'quizzes', which the suite does not define (defined: questions)*",
    ])


@pytest.mark.plugin
def test_data_callable_that_raises_fails_the_run(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_s='''
import pytest_geo

def rows():
    raise RuntimeError("database is down")

s_eval = pytest_geo.suite("s", data={"rows": rows})

@s_eval.metric
def m(rows, expected):
    return True
''')
    result = run(pytester)
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*suite 's': dataset 'rows' failed to load: RuntimeError: database is down*"])


@pytest.mark.plugin
def test_data_file_that_cannot_be_read_fails_the_run(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_s='''
import pytest_geo
s_eval = pytest_geo.suite("s", data={"rows": "missing.jsonl"})

@s_eval.metric
def m(rows, expected):
    return True
''')
    result = run(pytester)
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*suite 's': dataset 'rows' failed to load: *missing.jsonl: cannot read dataset*"])


@pytest.mark.plugin
def test_jsonl_data_path(pytester: pytest.Pytester) -> None:
    pytester.makefile(".jsonl", pairs='{"input": 2, "expected": 4}\n{"input": 3, "expected": 9}\n')
    pytester.makepyfile(test_s='''
import pytest_geo
s_eval = pytest_geo.suite("square", data={"rows": "pairs.jsonl"})

@s_eval.metric
def m(rows, expected):
    return rows * rows == expected
''')
    run(pytester).stdout.fnmatch_lines(["- square::m: 1.0000"])


@pytest.mark.plugin
def test_empty_dataset_reports_no_examples(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_s='''
import pytest_geo
s_eval = pytest_geo.suite("s", data={"rows": []})

@s_eval.metric
def m(rows, expected):
    return True
''')
    result = run(pytester)
    assert result.ret == 0
    assert result.stdout.lines[-2] == "- s::m: 0.0000 | no examples"


@pytest.mark.plugin
def test_feedback_is_folded_and_shortened(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_s='''
import pytest_geo
s_eval = pytest_geo.suite("s", data={"rows": [(i, None) for i in range(60)]})

@s_eval.metric
def m(rows, expected):
    return (0, "same" if rows < 10 else f"distinct feedback number {rows}")
''')
    result = run(pytester)
    line = result.stdout.lines[-2]
    assert line.startswith("- s::m: 0.0000 | same (x10); distinct feedback number 10; distinct feedback number 11;")
    assert line.endswith(" more)")
    left = int(line.rsplit("(", 1)[1].split()[0])
    shown = line.count("distinct feedback number")
    assert shown + left == 50


@pytest.mark.plugin
def test_markers_select_suites(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_answer=SUITE, test_plain="def test_ok():\n    pass\n")
    pytester.makepyfile(test_other='''
import pytest_geo
other_eval = pytest_geo.suite("other", data={"rows": [(1, 1)]})

@other_eval.metric
def m(rows, expected):
    return True
''')
    result = run(pytester, "--strict-markers", "-m", "answer")
    result.assert_outcomes(passed=2, deselected=2)
    result = run(pytester, "--strict-markers", "-m", "geo and not slow")
    result.assert_outcomes(passed=1, deselected=3)
    result.stdout.no_fnmatch_line("*answer::*")


@pytest.mark.plugin
def test_deselected_rows_are_never_run(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_s='''
import pytest_geo
s_eval = pytest_geo.suite("s", data={"rows": [(1, 1), (2, 2), (3, 3)]})

@s_eval.metric
def m(rows, expected):
    with open("called.txt", "a") as f:
        f.write(f"{rows}\\n")
    return True
''')
    result = run(pytester, "--deselect", "test_s.py::s::train[1]")
    result.assert_outcomes(passed=2, deselected=1)
    assert (pytester.path / "called.txt").read_text().split() == ["1", "3"]


THRESHOLD = '''
import pytest_geo
s_eval = pytest_geo.suite("s", data={"rows": [(1, 1), (2, 0)]}, threshold=THRESHOLD)

@s_eval.metric
def m(rows, expected):
    return rows == expected
'''


@pytest.mark.plugin
def test_threshold_fails_the_run(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_s=THRESHOLD.replace("THRESHOLD", "0.75"))
    result = run(pytester)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=2, failed=1)  # the gate is a failed test of its own
    result.stdout.fnmatch_lines(["FAILED s::threshold - score 0.5000 < 0.7500 (s::m, n=2)"])


@pytest.mark.plugin
def test_threshold_met_and_min_score_override(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_s=THRESHOLD.replace("THRESHOLD", "0.5"))
    assert run(pytester).ret == 0
    result = run(pytester, "--geo-min-score", "s=0.6")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["FAILED s::threshold - score 0.5000 < 0.6000 (s::m, n=2)"])


@pytest.mark.plugin
def test_scores_alone_never_fail_without_threshold(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_s=THRESHOLD.replace("THRESHOLD", "None"))
    assert run(pytester).ret == 0


@pytest.mark.plugin
def test_bad_min_score_value(pytester: pytest.Pytester) -> None:
    result = run(pytester, "--geo-min-score", "s")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*'s' is not SUITE=VALUE*"])


YAML_SUITE = """
suite: square
procedure: procs:square
data:
  rows:
    - {input: 2, expected: 4}
    - {input: 3, expected: 10}
metric:
  builtin: exact_match
  dataset: rows
markers: [math]
"""


@pytest.mark.plugin
def test_yaml_suite_with_builtin_metric(pytester: pytest.Pytester) -> None:
    pytester.syspathinsert()
    pytester.makepyfile(procs="def square(x):\n    return x * x\n\ndef close(rows, expected):\n    return (1.0, 'ok')\n")
    pytester.makefile(".geo.yaml", sq=YAML_SUITE)
    result = run(pytester, "--strict-markers", "-m", "math")
    result.assert_outcomes(passed=2)
    assert result.stdout.lines[-2] == "- square::exact_match: 0.5000"


@pytest.mark.plugin
def test_yaml_suite_with_function_metric(pytester: pytest.Pytester) -> None:
    pytester.syspathinsert()
    pytester.makepyfile(procs="def close(rows, expected):\n    return (1.0, 'ok')\n")
    pytester.makefile(".geo.yaml", sq=YAML_SUITE.replace("builtin: exact_match", "function: procs:close").replace(
        "procedure: procs:square\n", ""))
    result = run(pytester)
    assert result.stdout.lines[-2] == "- square::close: 1.0000 | ok (x2)"


@pytest.mark.plugin
@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("suite: [unclosed", "sq.geo.yaml:1: invalid YAML: *"),
        (YAML_SUITE.replace("dataset: rows", "dataset: rows\n  colour: blue"),
         "sq.geo.yaml: metric.colour: unknown key (known keys: name, dataset, builtin, function)"),
        (YAML_SUITE.replace("suite: square", "suite: 7"), "sq.geo.yaml: suite: 7 is not of type 'string'"),
        ("suite: !!python/object/apply:os.system ['echo pwned']\n", "sq.geo.yaml:1: invalid YAML: *python/object/apply:os.system*"),
        (YAML_SUITE.replace("procs:square", "nosuchmodule:square"),
         "sq.geo.yaml: procedure: cannot import 'nosuchmodule:square': ModuleNotFoundError: *"),
    ],
)
def test_bad_yaml_suite_files(pytester: pytest.Pytester, text: str, message: str) -> None:
    pytester.syspathinsert()
    pytester.makepyfile(procs="def square(x):\n    return x * x\n")
    pytester.makefile(".geo.yaml", sq=text)
    result = run(pytester)
    assert result.ret != 0
    result.stdout.fnmatch_lines([f"*{message}"])
    assert not (pytester.path / "pwned").exists()


@pytest.mark.plugin
def test_suite_files_pattern_is_configurable(pytester: pytest.Pytester) -> None:
    pytester.syspathinsert()
    pytester.makepyfile(procs="def square(x):\n    return x * x\n")
    pytester.makefile(".yml", evals_sq=YAML_SUITE)
    pytester.makeini("[pytest]\ngeo_suite_files = evals_*.yml\n")
    run(pytester).assert_outcomes(passed=2)


@pytest.mark.plugin
def test_geo_metric_in_a_declared_suite_shares_the_report_format(geo_project: pytest.Pytester) -> None:
    geo_project.makefile(".geo.yaml", rewriter=textwrap.dedent("""
        suite: rewriter
        data:
          products: data/smoke.jsonl
        metric: {builtin: rank_improvement, dataset: products}
        threshold: 2.5
    """))
    result = geo_project.runpytest("rewriter.geo.yaml", "data/smoke.jsonl", "--geo-mock", "--geo-report", "r.json")
    result.assert_outcomes(passed=16, failed=1)
    result.stdout.fnmatch_lines([
        "FAILED rewriter::threshold - score 2.0000 < 2.5000 *",
        "data/smoke.jsonl: n=8 avg_rank_improvement=2.0000 *",
        "rewriter: n=8 avg_rank_improvement=2.0000 *",
        "Evals:",
        "- data/smoke.jsonl::rank_improvement: 2.0000 | rank 3 -> 1 (x8)",
        "- rewriter::rank_improvement: 2.0000 | rank 3 -> 1 (x8)",
    ])
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    report = json.loads((geo_project.path / "r.json").read_text())
    by_suite = {s["suite"]: s for s in report["suites"]}
    for name in ("rewriter", "data/smoke.jsonl"):
        assert by_suite[name]["avg_rank_improvement"] == 2.0
        assert by_suite[name]["n"] == 8


@pytest.mark.plugin
def test_repository_example_suites_run_offline(geo_project: pytest.Pytester) -> None:
    repo = Path(__file__).resolve().parent.parent
    shutil.copytree(repo / "eval", geo_project.path / "eval")
    result = geo_project.runpytest("eval/suites", "--geo-mock", "--strict-markers")
    result.assert_outcomes(passed=11)
    assert result.stdout.lines[-4:-1] == [
        "Evals:",
        "- rewriter::rank_improvement: 2.0000 | rank 3 -> 1 (x8)",
        "- sentiment::accuracy: 0.6667 | 'Not great, not awful': said positive",
    ]


@pytest.mark.plugin
def test_pytest_markers_lists_suites_of_conftest_and_yaml_files(pytester: pytest.Pytester) -> None:
    pytester.makeconftest('''
import pytest_geo
tone_eval = pytest_geo.suite("tone", data={"rows": [("a", "a")]}, markers=["nightly"])
tone_eval.metric("exact_match")
''')
    (pytester.path / "eval").mkdir()
    (pytester.path / "eval" / "sq.geo.yaml").write_text(
        "suite: square\nprocedure: builtins:str\nmarkers: [math]\ndata:\n  rows: rows.jsonl\nmetric:\n  builtin: exact_match\n"
        "  dataset: rows\n")
    result = pytester.runpytest("--markers")
    assert result.ret == 0
    result.stdout.fnmatch_lines_random(["@pytest.mark.tone: pytest-geo eval suite marker",
                                        "@pytest.mark.nightly: pytest-geo eval suite marker",
                                        "@pytest.mark.square: pytest-geo eval suite marker",
                                        "@pytest.mark.math: pytest-geo eval suite marker"])


# --- a metric that exits or interrupts, data without end -----------------------------------


EXITING_METRIC = '''
import sys
import pytest_geo
s_eval = pytest_geo.suite("s", data={"rows": [(1, 1), (3, 1), (2, 2)]})

@s_eval.metric
def exits(rows, expected):
    if rows == 3:
        sys.exit(3)
    if rows == 2:
        sys.exit()
    return True
'''


@pytest.mark.plugin
def test_a_metric_calling_sys_exit_scores_zero_with_an_error_line(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_s=EXITING_METRIC)
    result = pytester.runpytest("-p", "no:cacheprovider", "--geo-report", "r.json")
    result.assert_outcomes(passed=1, failed=2)
    # the metric's own traceback, as pytest shows a test calling sys.exit (issue 37); none of the plugin's
    result.stdout.fnmatch_lines([">           sys.exit(3)", "E           SystemExit: 3",
                                 ">           sys.exit()", "E           SystemExit"])
    result.stdout.no_fnmatch_line("*pytest_geo/suites/*")
    report = json.loads((pytester.path / "r.json").read_text())
    assert [(r["score"], r["feedback"]) for r in report["rows"]][1:] == [
        (0.0, "error: SystemExit: 3"), (0.0, "error: SystemExit")]


@pytest.mark.e2e
def test_a_metric_raising_keyboard_interrupt_still_stops_the_run(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_s='''
import pytest_geo
s_eval = pytest_geo.suite("s", data={"rows": [(1, 1), (2, 1), (3, 1)]})

@s_eval.metric
def stops(rows, expected):
    if rows == 2:
        raise KeyboardInterrupt
    return True
''')
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*KeyboardInterrupt*"])
    result.assert_outcomes(passed=1)


ENDLESS = '''
import itertools
import pytest_geo

def forever():
    for n in itertools.count():
        yield (n, n)

def growing():
    for n in itertools.count():
        yield ("x" * (1 << 20), n)

endless_eval = pytest_geo.suite("endless", data={"rows": forever})
huge_eval = pytest_geo.suite("huge", data={"rows": growing()})

@endless_eval.metric
def same(rows, expected):
    return rows == expected

@huge_eval.metric
def fine(rows, expected):
    return True

def test_plain():
    pass
'''


@pytest.mark.e2e
@pytest.mark.parametrize("args", [(), ("--co",), ("-k", "plain")])
def test_endless_suite_data_is_a_collection_error_naming_the_suite_and_the_bound(
        pytester: pytest.Pytester, args: tuple[str, ...]) -> None:
    pytester.makepyfile(test_endless=ENDLESS)
    started = time.monotonic()
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", *args, timeout=60)
    assert time.monotonic() - started < 30
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines([
        "*suite 'endless': dataset 'rows': more than 100,000 rows, the bound for data from Python "
        "code (a never-ending generator?)*",
    ])
    result.stdout.fnmatch_lines([
        "*suite 'huge': dataset 'rows': rows larger than 256 MiB in memory, the bound for data from "
        "Python code*",
    ])
    no_traceback(result)
