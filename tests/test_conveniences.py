"""Small things users expect: where the report lines print, suite markers in
`pytest --markers`, `egeo --version`, the header for positional datasets, and no dummy
key for a local server."""

from __future__ import annotations

import pytest


def test_report_lines_come_together_after_the_metrics(geo_project: pytest.Pytester) -> None:
    result = geo_project.runpytest("data/smoke.jsonl", "--geo-mock", "--geo-report", "r.json",
                                   "--geo-html", "r.html")
    lines = result.stdout.lines
    metrics = next(i for i, line in enumerate(lines) if line.startswith("data/smoke.jsonl: n=8"))
    written = lines.index("report written to r.json")
    assert lines[written + 1] == "HTML report written to r.html"
    assert metrics < written < lines.index("Evals:")
