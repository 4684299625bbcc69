"""Suite rows from Python data whose order is not fixed (a set, a generator over one)
are named by content and collected in that name's order: under xdist each worker
collects the rows itself, and with names by position each ran "train[3]" as whatever
its own hash seed put third, so some rows ran twice, others never, and the report
said all passed. Lists and tuples (and files) keep their position names."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.e2e

pytest.importorskip("xdist")

WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]

SET_SUITE = f'''
import os
import pytest_geo

words = pytest_geo.suite("words", data={{"rows": {{(w, w.upper()) for w in {WORDS!r}}}}})

@words.metric
def upper(rows, expected):
    with open("scored.txt", "a") as out:
        out.write(rows + "\\n")
    return rows.upper() == expected
'''


def run_two_workers(pytester: pytest.Pytester, *extra: str) -> pytest.RunResult:
    """Two real xdist workers with different hash seeds (as two workers get by default,
    unless PYTHONHASHSEED is set), so a set of strings iterates in a different order in each."""
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "xdist", "--dist", "load",
                                         "--tx", "popen//env:PYTHONHASHSEED=1", "--tx", "popen//env:PYTHONHASHSEED=2",
                                         "--geo-report", "r.json", *extra)


def test_rows_from_a_set_run_once_each_under_workers_with_different_hash_seeds(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_words=SET_SUITE)
    result = run_two_workers(pytester)
    result.assert_outcomes(passed=8)
    assert sorted((pytester.path / "scored.txt").read_text().split()) == WORDS
    report = json.loads((pytester.path / "r.json").read_text())
    assert sorted(r["input"].strip("'") for r in report["rows"]) == WORDS


def test_rows_from_a_set_are_named_by_content_and_lists_by_position(pytester: pytest.Pytester,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(test_words=SET_SUITE + '''
listed = pytest_geo.suite("listed", data={"rows": [("b", "B"), ("a", "A"), ("b", "B")]})

@listed.metric
def same(rows, expected):
    return rows.upper() == expected
''')
    ids = []
    for seed in ("1", "2"):
        monkeypatch.setenv("PYTHONHASHSEED", seed)
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--co", "-q")
        ids.append([line for line in result.stdout.lines if "::" in line])
    assert ids[0] == ids[1]
    words = [i for i in ids[0] if "::words::" in i]
    assert len(words) == 8 and words == sorted(words)
    assert all(len(i.split("[")[1].rstrip("]")) == 8 for i in words)  # 8 hex digits of the content's hash
    assert [i for i in ids[0] if "::listed::" in i] == [
        "test_words.py::listed::train[0]", "test_words.py::listed::train[1]", "test_words.py::listed::train[2]"]
