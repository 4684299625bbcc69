"""The HTML report's flag rates and red-team table, from a JSON report's values: the
numbers as the terminal prints them, names as text, nothing when the run had no flags."""

from __future__ import annotations

from html.parser import HTMLParser
from typing import Any

import pytest

from pytest_geo.report.html import render_html
from pytest_geo.report.html_variants import judges_section

pytestmark = pytest.mark.unit


class Tables(HTMLParser):
    """Each table's body rows (cell texts) by the table's class, and every tag seen."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.tags: list[str] = []
        self.table: str | None = None
        self.in_body = False
        self.cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        if tag == "table":
            self.table = dict(attrs).get("class") or ""
            self.tables.setdefault(self.table, [])
        elif tag == "tbody":
            self.in_body = True
        elif tag == "tr" and self.in_body and self.table is not None:
            self.tables[self.table].append([])
        elif tag == "td" and self.in_body:
            self.cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self.cell is not None and self.table is not None:
            self.tables[self.table][-1].append("".join(self.cell))
            self.cell = None
        elif tag == "tbody":
            self.in_body = False
        elif tag == "table":
            self.table = None

    def handle_data(self, data: str) -> None:
        if self.cell is not None:
            self.cell.append(data)


def tables_of(html: str) -> Tables:
    tables = Tables()
    tables.feed(html)
    return tables


def parsed(report: dict[str, Any]) -> Tables:
    return tables_of(render_html(report))


def rate(n: int, flagged: int, value: float | None, se: float | None) -> dict[str, Any]:
    return {"n": n, "flagged": flagged, "rate": value, "se": se}


SUITE = {"suite": "d<b>x</b>", "metric": "rank_improvement", "split": "test", "n": 4, "score": 0.5}
FLAG_RATES = {  # sorted, as a report read back from its file has them: the panel is shown last
    "<i>b</i>": {"before": rate(3, 0, 0.0, 0.0), "after": rate(4, 1, 0.25, 0.2165)},  # a cache without the list
    "a": {"before": rate(3, 1, 1 / 3, 0.2722), "after": rate(3, 2, 2 / 3, 0.2722)},
    "panel": {"before": rate(0, 0, None, None), "after": rate(4, 3, 0.75, 0.2165)},
    "z": {"before": rate(1, 0, 0.0, 0.0), "after": rate(1, 1, 1.0, 0.0)},
}
REDTEAM = [{"suite": "d<b>x</b>", "split": "test", "attacks": {
    "injection": {"panel": {"n": 2, "mean": -0.5, "se": 1.0, "flag_rate": 1.0, "flag_rate_se": 0.0, "flag_n": 2},
                  "a": {"n": 2, "mean": -3.0, "se": 1.0, "flag_rate": 1.0, "flag_rate_se": 0.0, "flag_n": 2},
                  "<i>b</i>": {"n": 2, "mean": 2.0, "se": 1.0, "flag_rate": 0.5, "flag_rate_se": 0.35355339,
                               "flag_n": 2}},
    "hidden": {"<i>b</i>": {"n": 1, "mean": 0.123456, "se": 0.0, "flag_rate": None, "flag_rate_se": None,
                            "flag_n": 0}},
}}]


def test_each_judges_flag_rates_before_and_after_with_the_rows_counted() -> None:
    page = parsed({"suites": [{**SUITE, "flag_rates": FLAG_RATES}]})
    assert page.tables["flags"] == [
        ["<i>b</i>", "0.0000 (n=3)", "0.2500", "4"],  # its before rate is over fewer rows: said so
        ["a", "0.3333", "0.6667", "3"],
        ["z", "0.0000", "1.0000", "1"],
        ["panel", "n/a (n=0)", "0.7500", "4"],
    ]
    assert "i" not in page.tags and "b" not in page.tags  # names from the run are text, never markup


def test_the_red_team_table_is_attack_by_judge_with_improvement_and_flag_rate() -> None:
    page = parsed({"suites": [SUITE], "redteam": REDTEAM})
    assert page.tables["redteam"] == [
        ["injection", "-3.0000 ± 1.0000, flagged 1.0000 ± 0.0000 (n=2)",
         "+2.0000 ± 1.0000, flagged 0.5000 ± 0.3536 (n=2)", "-0.5000 ± 1.0000, flagged 1.0000 ± 0.0000 (n=2)"],
        ["hidden", "", "+0.1235 ± 0.0000, flagged n/a ± n/a (n=1)", ""],  # a judge that scored no row: empty
    ]
    html = render_html({"suites": [SUITE], "redteam": REDTEAM})
    assert "<th>attack</th><th>a</th><th>&lt;i&gt;b&lt;/i&gt;</th><th>panel</th>" in html
    assert "<h3>d&lt;b&gt;x&lt;/b&gt; [test]</h3>" in html
    assert "flags" not in parsed({"suites": [SUITE], "redteam": REDTEAM}).tables


def test_a_run_without_flags_or_attacks_has_neither_section() -> None:
    html = render_html({"suites": [SUITE], "redteam": []})
    assert "Flagged as questionable" not in html and "Red-team attacks" not in html


def test_the_variants_by_judges_matrix_shows_the_panel_last_from_a_sorted_report() -> None:
    """A report read back from its file has its keys sorted: the matrix's columns keep the
    panel last, as the terminal prints them, and a judge missing from a row leaves it empty."""
    cell = {"n": 2, "mean": 1.0, "stderr": 0.5}
    matrix = {"plain": {"a": cell, "panel": {**cell, "mean": 1.5}, "z": {**cell, "mean": 2.0}},
              "bold": {"a": {**cell, "mean": -1.0}, "panel": cell}}
    figures = {"n": 2, "avg_rank_improvement": 1.5, "win_rate": 1.0, "stderr_rank_improvement": 0.5}
    judged = {**SUITE, "judges": {"a": figures, "z": figures}, "panel": figures,
              "agreement": {"krippendorff_alpha": 0.5, "mean_kendall_tau": 0.5, "direction_agreement": 1.0,
                            "direction_rows": 2}}
    report = {"suites": [judged], "variants": [{"suite": "d", "split": "test", "matrix": matrix}]}
    html = "".join(judges_section(report))
    assert tables_of(html).tables["judge-matrix"] == [
        ["plain", "+1.0000 ± 0.5000 (n=2)", "+2.0000 ± 0.5000 (n=2)", "+1.5000 ± 0.5000 (n=2)"],
        ["bold", "-1.0000 ± 0.5000 (n=2)", "", "+1.0000 ± 0.5000 (n=2)"],
    ]
    assert "<th>variant</th><th>a</th><th>z</th><th>panel</th>" in html
