"""The bad-input corpus: each malformed input gives its exact, clear message, no Python
traceback, the valid rows in the same file still run, and the report is still written.

Extension point: a new kind of input (suite files, say) adds its files under
`tests/corpus/<kind>/`, a runner in `RUNNERS` and its cases to `CASES`.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import copy_prompts

REPO = Path(__file__).resolve().parent.parent
CORPUS = Path(__file__).resolve().parent / "corpus"
TRACEBACK_MARKS = ("Traceback (most recent call last)", "raise ", ".py:[0-9]*: in ")


@dataclass(frozen=True)
class Case:
    kind: str  # a key of RUNNERS, and the corpus subfolder
    name: str  # a file (datasets) or a folder (prompts) under tests/corpus/<kind>/
    message: str  # the exact message line; "" for inputs that are accepted
    passed: tuple[str, ...] = ("ok1", "ok3")  # node-id names that must still pass


CASES = [
    Case("datasets", "truncated_line.jsonl",
         "truncated_line.jsonl:2: invalid JSON: the line ends inside a value (truncated line?): Expecting value"),
    Case("datasets", "not_json.jsonl", "not_json.jsonl:2: invalid JSON: Expecting value at column 1"),
    Case("datasets", "trailing_comma.jsonl",
         "trailing_comma.jsonl:2: invalid JSON: Expecting property name enclosed in double quotes at column 307"),
    Case("datasets", "two_objects.jsonl",
         "two_objects.jsonl:2: invalid JSON: more than one value on the line (extra data from column 306)"),
    Case("datasets", "wrong_type_query.jsonl", "wrong_type_query.jsonl:2: query: expected string, got int 42"),
    Case("datasets", "null_description.jsonl",
         "null_description.jsonl:2: candidates[1].description: expected string, got null"),
    # null is an absent target_id, as in the E-GEO harness: the row runs with a drawn target
    Case("datasets", "null_target.jsonl", "", ("ok1", "bad", "ok3")),
    Case("datasets", "numeric_candidate_id.jsonl",
         "numeric_candidate_id.jsonl:2: candidates[0].id: expected string, got int 7"),
    Case("datasets", "numeric_query_id.jsonl", "numeric_query_id.jsonl:2: query_id: expected string, got int 17"),
    Case("datasets", "empty_candidates.jsonl", "empty_candidates.jsonl:2: fewer than 2 candidates (got 0)"),
    Case("datasets", "one_candidate.jsonl", "one_candidate.jsonl:2: fewer than 2 candidates (got 1)"),
    Case("datasets", "candidates_not_array.jsonl",
         'candidates_not_array.jsonl:2: candidates: expected array, got dict {"a": {"id": "a", "title": "Steel ket...'),
    Case("datasets", "candidate_not_object.jsonl",
         'candidate_not_object.jsonl:2: candidates[0]: expected object, got str "a"'),
    Case("datasets", "very_long_line.jsonl",
         'very_long_line.jsonl:2: query: expected string, got list ["xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...'),
    Case("datasets", "invalid_utf8.jsonl", "invalid_utf8.jsonl:2: invalid UTF-8 at byte 33"),
    Case("datasets", "lone_surrogate.jsonl",
         "lone_surrogate.jsonl:2: invalid Unicode: a lone surrogate escape (\\ud800) in a string"),
    Case("datasets", "missing_query.jsonl", "missing_query.jsonl:2: row: 'query' is a required property"),
    Case("datasets", "empty_query.jsonl", "empty_query.jsonl:2: query: must not be empty"),
    Case("datasets", "missing_description.jsonl",
         "missing_description.jsonl:2: candidates[1]: 'description' is a required property"),
    Case("datasets", "unknown_target.jsonl",
         "unknown_target.jsonl:2: target_id 'zz' is not among the candidate ids (a, b, t)"),
    Case("datasets", "duplicate_candidate_ids.jsonl", "duplicate_candidate_ids.jsonl:2: duplicate candidate ids: a"),
    Case("datasets", "top_level_array.jsonl",
         "top_level_array.jsonl:2: expected one JSON object per line, got an array"),
    Case("datasets", "deeply_nested.jsonl", "deeply_nested.jsonl:2: invalid JSON: nested too deeply"),
    Case("datasets", "huge_integer.jsonl", "huge_integer.jsonl:2: invalid JSON: a number with too many digits"),
    Case("datasets", "nul_byte.jsonl", "nul_byte.jsonl:2: invalid JSON: Invalid control character at column 82"),
    Case("datasets", "blank_candidate_id.jsonl",
         "blank_candidate_id.jsonl:2: candidates[0].id: must not be blank (only whitespace)"),
    Case("datasets", "padded_candidate_ids.jsonl",
         "padded_candidate_ids.jsonl:2: candidates[1].id: 'a ' begins or ends with whitespace, which answers cannot "
         "keep"),
    Case("datasets", "newline_ended_candidate_id.jsonl",
         "newline_ended_candidate_id.jsonl:2: candidates[1].id: 'b\\n' begins or ends with whitespace, which answers "
         "cannot keep"),
    Case("datasets", "duplicate_key.jsonl", "duplicate_key.jsonl:2: duplicate key 'query' in one object"),
    Case("datasets", "duplicate_key_in_candidate.jsonl",
         "duplicate_key_in_candidate.jsonl:2: duplicate key 'id' in one object"),
    # accepted, not errors: a byte-order mark, CRLF line ends, a query_id used three times
    Case("datasets", "bom.jsonl", ""),
    Case("datasets", "crlf.jsonl", ""),
    Case("datasets", "duplicate_query_ids.jsonl", "", ("dup@line1", "dup@line2", "dup@line3")),
    # generated names never equal a query id (test_xdist.py checks each row keeps its data)
    Case("datasets", "colliding_names.jsonl", "",
         ("q1@line1", "q1@line2", "q1@line2@line3", "line4", "line4@line5", "ok1", "ok3")),
    # prompt directories: the run stops at start (exit 4) naming the file and the placeholder
    Case("prompts", "missing_file", "ERROR: */missing_file/rewriter_system.txt: prompt file not found", ()),
    Case("prompts", "missing_placeholder",
         "ERROR: */missing_placeholder/rewriter_user.txt: missing placeholder {{description}} that this role needs",
         ()),
    Case("prompts", "unknown_placeholder",
         "ERROR: */unknown_placeholder/ranker_user.txt: unknown placeholder {{qurey}} (this template can use: *", ()),
    Case("prompts", "ranker_without_candidates",
         "ERROR: */ranker_without_candidates/ranker_user.txt: missing placeholder {{candidates}} that this role needs",
         ()),
    # suite files: a collection error naming the file and the field (or the suite and the
    # dataset); with --continue-on-collection-errors the valid suite still runs
    Case("suites", "bad_yaml.geo.yaml", "bad_yaml.geo.yaml:2: invalid YAML: expected ',' or ']', but got ':'"),
    Case("suites", "python_tag.geo.yaml",
         "python_tag.geo.yaml:1: invalid YAML: could not determine a constructor for the tag "
         "'tag:yaml.org,2002:python/object/apply:os.system'"),
    Case("suites", "duplicate_key.geo.yaml", "duplicate_key.geo.yaml:4: invalid YAML: found duplicate key 'data'"),
    Case("suites", "unknown_key.geo.yaml",
         "unknown_key.geo.yaml: colour: unknown key (known keys: suite, procedure, data, test_data, metric, threshold, row_threshold, markers)"),
    Case("suites", "missing_metric.geo.yaml", "missing_metric.geo.yaml: (top level): 'metric' is a required property"),
    Case("suites", "not_a_mapping.geo.yaml",
         "not_a_mapping.geo.yaml: (top level): expected a mapping of suite fields, got list"),
    Case("suites", "bad_function_path.geo.yaml",
         "bad_function_path.geo.yaml: metric.function: 'corpus_metrics.always' is not a module:function path"),
    Case("suites", "builtin_and_function.geo.yaml",
         "builtin_and_function.geo.yaml: metric: give exactly one of builtin or function"),
    Case("suites", "row_without_input.geo.yaml",
         "row_without_input.geo.yaml: data.rows[0]: 'input' is a required property"),
    Case("suites", "suite_name_not_identifier.geo.yaml",
         "suite_name_not_identifier.geo.yaml: suite: 'my suite' is not a Python identifier "
         "(a suite is named after its procedure)"),
    Case("suites", "metric_unknown_dataset.geo.yaml",
         "metric_unknown_dataset.geo.yaml: suite 'square': metric 'always' names dataset 'examples', "
         "which the suite does not define (defined: rows)"),
    Case("suites", "missing_data_file.geo.yaml",
         "missing_data_file.geo.yaml: suite 'square': dataset 'rows' failed to load: "
         "*no_such_rows.jsonl: cannot read dataset: No such file or directory"),
]


def run_dataset(pytester: pytest.Pytester, case: Case) -> None:
    copy_prompts(pytester.path / "prompts")
    shutil.copy(CORPUS / "datasets" / case.name, pytester.path / case.name)
    result = pytester.runpytest(case.name, "--geo-mock", "--geo-report", "report.json", "-rA")
    output = "\n".join(result.outlines + result.errlines)
    for mark in TRACEBACK_MARKS:
        result.stdout.no_fnmatch_line(f"*{mark}*")
    if case.message:
        assert case.message in result.outlines, output
        result.assert_outcomes(passed=len(case.passed), failed=1)
    else:
        result.assert_outcomes(passed=len(case.passed))
    result.stdout.fnmatch_lines_random([f"PASSED {case.name}::{name}" for name in case.passed])
    assert max(map(len, result.outlines)) < 300, "a message grew with its input"
    report = json.loads((pytester.path / "report.json").read_text(encoding="utf-8"))
    assert sorted(r["nodeid"].split("::")[1] for r in report["rows"]) == sorted(case.passed)
    assert [p["problem"] for p in report["problems"]] == ([case.message.split(":2: ", 1)[1]] if case.message else [])


def run_prompts(pytester: pytest.Pytester, case: Case) -> None:
    shutil.copytree(CORPUS / "prompts" / case.name, pytester.path / case.name)
    shutil.copy(CORPUS / "datasets" / "bom.jsonl", pytester.path / "rows.jsonl")
    result = pytester.runpytest("rows.jsonl", "--geo-mock", "--geo-prompts", case.name)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([case.message])
    for mark in TRACEBACK_MARKS:
        result.stdout.no_fnmatch_line(f"*{mark}*")
        result.stderr.no_fnmatch_line(f"*{mark}*")


GOOD_SUITE = """
suite: fine
data:
  rows: [{input: 1, expected: 1}, {input: 2, expected: 2}]
metric: {function: "corpus_metrics:always", dataset: rows}
"""


def run_suite_file(pytester: pytest.Pytester, case: Case) -> None:
    pytester.syspathinsert()
    pytester.makepyfile(corpus_metrics="def always(rows, expected):\n    return True\n")
    pytester.makefile(".geo.yaml", good=GOOD_SUITE)
    shutil.copy(CORPUS / "suites" / case.name, pytester.path / case.name)
    result = pytester.runpytest(
        case.name, "good.geo.yaml", "--continue-on-collection-errors", "--geo-report", "report.json", "-rA"
    )
    assert result.ret != pytest.ExitCode.OK  # a suite that cannot load is a failure of the run
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines([case.message])
    for mark in TRACEBACK_MARKS:
        result.stdout.no_fnmatch_line(f"*{mark}*")
    assert not (pytester.path / "pwned").exists()
    report = json.loads((pytester.path / "report.json").read_text(encoding="utf-8"))
    assert [(s["suite"], s["n"], s["score"]) for s in report["suites"]] == [("fine", 2, 1.0)]


RUNNERS: dict[str, Callable[[pytest.Pytester, Case], None]] = {
    "datasets": run_dataset, "prompts": run_prompts, "suites": run_suite_file,
}


@pytest.mark.unit
def test_the_corpus_is_large_enough_and_every_file_has_a_case() -> None:
    assert len([c for c in CASES if c.message]) >= 25
    named = {(c.kind, c.name) for c in CASES}
    on_disk = {(kind, p.name) for kind in RUNNERS for p in (CORPUS / kind).iterdir()}
    assert on_disk == named


@pytest.mark.plugin
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.kind}/{c.name}")
def test_corpus(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, case: Case) -> None:
    monkeypatch.delenv("GEO_EVAL_MOCK", raising=False)
    RUNNERS[case.kind](pytester, case)


@pytest.mark.e2e
def test_egeo_evaluate_stops_at_start_on_a_missing_placeholder(capsys: pytest.CaptureFixture[str]) -> None:
    from pytest_geo.cli import main

    prompts = CORPUS / "prompts" / "missing_placeholder"
    status = main(["evaluate", "--dataset", str(CORPUS / "datasets" / "bom.jsonl"), "--mock", "--prompts", str(prompts)])
    captured = capsys.readouterr()
    assert status == 2
    assert captured.err == (
        f"egeo: error: {prompts}/rewriter_user.txt: missing placeholder {{{{description}}}} that this role needs\n")
    assert captured.out == ""
