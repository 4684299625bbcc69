"""A baseline report whose values are not what a report holds (scores NaN, strings,
lists or 1e308, a suite name that is a list, a 5,000-digit number, "false" for
`complete`) is a usage error at start naming the file and the field, before any call:
it used to let every row run and pay, then end in INTERNALERROR with no report, or be
read wrongly ("9" as 9.0, "false" as complete)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.plugin

SUITE = "data/smoke.jsonl"
NODE = "data/smoke.jsonl::q1"


def baseline(**changes: Any) -> dict[str, Any]:
    """A baseline the smoke dataset's run compares with, with `changes` at dotted paths."""
    data: dict[str, Any] = {
        "suites": [{"suite": SUITE, "metric": "rank_improvement", "split": "train", "score": 1.0}],
        "rows": [{"suite": SUITE, "nodeid": NODE, "score": 1.0, "error": None}],
        "complete": True,
    }
    for path, value in changes.items():
        *parents, last = path.split(".")
        target = data
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        target[last] = value
    return data


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (json.dumps(baseline(**{"suites.0.score": float("nan")})), "suites[[]0[]].score is NaN, not a finite number (at most 1e15 in size)"),
        (json.dumps(baseline(**{"rows.0.score": "9"})), 'rows[[]0[]].score is "9", not a finite number (at most 1e15 in size)'),
        (json.dumps(baseline(**{"rows.0.score": [1]})), "rows[[]0[]].score is [[]1[]], not a finite number (at most 1e15 in size)"),
        (json.dumps(baseline(**{"rows.0.score": 1e308})), "rows[[]0[]].score is 1e+308, not a finite number (at most 1e15 in size)"),
        (json.dumps(baseline(**{"rows.0.score": True})), "rows[[]0[]].score is true, not a finite number (at most 1e15 in size)"),
        (json.dumps(baseline(**{"suites.0.suite": ["a"]})), 'suites[[]0[]].suite is [[]"a"[]], not a string'),
        (json.dumps(baseline(**{"rows.0.nodeid": 3})), "rows[[]0[]].nodeid is 3, not a string"),
        (json.dumps(baseline(**{"rows.0.error": 1})), "rows[[]0[]].error is 1, not a string or null"),
        (json.dumps(baseline(complete="false")), 'complete is "false", not true or false'),
        (json.dumps(baseline(metadata={"mock": "false"})), 'metadata.mock is "false", not true or false'),
        (json.dumps(baseline(metadata=[1])), "metadata is [[]1[]], not an object"),
        (json.dumps(baseline()).replace('"score": 1.0}]', '"score": 1' + "0" * 5000 + "}]", 1),
         "is not JSON: *(4300 digits)*value has 5001 digits"),
    ],
    ids=["nan", "string", "list", "1e308", "bool", "suite-list", "nodeid-int", "error-int", "complete-string",
         "mock-string", "metadata-list", "5000-digits"],
)
def test_a_hostile_baseline_is_a_usage_error_before_any_call(counting_client: pytest.Pytester,
                                                             text: str, message: str) -> None:
    (counting_client.path / "base.json").write_text(text)
    result = counting_client.runpytest(SUITE, "--geo-mock", "--geo-baseline", "base.json", "--geo-report", "r.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: --geo-baseline: base.json *{message}"])
    assert not (counting_client.path / "calls.json").exists() or json.loads(
        (counting_client.path / "calls.json").read_text()) == []
    assert not (counting_client.path / "r.json").exists()


def test_a_baseline_with_checked_values_still_compares(counting_client: pytest.Pytester) -> None:
    (counting_client.path / "base.json").write_text(json.dumps(baseline(metadata={"mock": True, "seed": 7})))
    result = counting_client.runpytest(SUITE, "--geo-mock", "--geo-baseline", "base.json", "--geo-report", "r.json")
    assert result.ret == pytest.ExitCode.OK
    [suite] = json.loads(Path(counting_client.path / "r.json").read_text())["baseline"]["suites"]
    assert suite["baseline_score"] == 1.0 and suite["paired"]["n"] == 1
