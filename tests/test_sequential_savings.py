"""--geo-sequential credits money not spent only to a comparison it decided: rows a
budget stopped were not saved by the comparison, and a report saying so overstates
what the sequential test is worth."""

from __future__ import annotations

import json

import pytest
from test_sequential import strategies

from conftest import GeoProject

pytestmark = pytest.mark.e2e


def test_rows_a_budget_stopped_are_not_credited_to_an_undecided_comparison(served_project: GeoProject) -> None:
    args = strategies(served_project.priced(), 100)
    # A budget of about one row (a row of two variants costs ~$0.00026 here).
    result = served_project.run(*args, "--geo-sequential", "--geo-budget", "0.0005", "--geo-max-output-tokens", "100",
                                "--geo-concurrency", "2", "--geo-report", "seq.json", "--geo-html", "seq.html")
    result.stdout.fnmatch_lines(["budget: * spent of $0.0005000; budget reached: *",
                                 "sequential: variants of rows.jsonl [[]train[]]: undecided after 0 of 100 rows "
                                 "(1 ran, 0 with an error left out); nothing saved (undecided)"])
    [entry] = json.loads((served_project.pytester.path / "seq.json").read_text())["sequential"]
    assert (entry["decided"], entry["rows_run"], entry["dollars_not_spent"]) == (False, 1, 0.0)
    html = (served_project.pytester.path / "seq.html").read_text(encoding="utf-8")
    assert "(1 ran); nothing saved (undecided)." in html

