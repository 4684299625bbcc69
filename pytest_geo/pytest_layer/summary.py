"""The end of a run on the process that prints: the JSON and HTML reports, the gates that
decide the exit status, and the terminal summary."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_geo.llm.usage import usage_lines
from pytest_geo.pytest_layer.state import settings_of
from pytest_geo.report.concurrency import stats_line
from pytest_geo.report.html import write_html_report
from pytest_geo.report.json_report import build_report, write_json_atomic
from pytest_geo.report.metadata import run_metadata
from pytest_geo.report.results import Results
from pytest_geo.report.terminal import terminal_lines


def write_reports(config: pytest.Config, results: Results, started: float, duration: float) -> bool:
    """Write the reports asked for; True when a gate (threshold, regression) fails the run."""
    results.metadata = run_metadata(settings_of(config), started, duration)
    path, html_path = config.getoption("geo_report"), config.getoption("geo_html")
    write_html = bool(html_path) and not results.empty
    if path or write_html:
        report = build_report(results)
        if path:
            write_json_atomic(Path(path), report)
        if write_html:
            write_html_report(Path(html_path), report)
    return bool(results.below_threshold() or (config.getoption("geo_fail_on_regression") and results.regressions()))


def terminal_summary(config: pytest.Config, results: Results, terminalreporter: Any) -> None:
    if results.empty:
        return
    terminalreporter.write_sep("=", "pytest-geo evaluation")
    path = config.getoption("geo_report")
    if path:
        terminalreporter.write_line(f"report written to {path}")
    if results.usage:
        terminalreporter.write_line("model usage:")
        for line in usage_lines(results.usage):
            terminalreporter.write_line(f"  {line}")
    if results.concurrency is not None:
        terminalreporter.write_line(stats_line(results.concurrency))
    if config.getoption("geo_html"):
        terminalreporter.write_line(f"HTML report written to {config.getoption('geo_html')}")
    for line in terminal_lines(results, show_split=settings_of(config).split == "all"):
        terminalreporter.write_line(line)
