"""The end of a run on the process that prints: the JSON and HTML reports, the gates that
decide the exit status, and the terminal summary."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from pytest_geo.llm.ledger import LOST_ROLE
from pytest_geo.llm.usage import empty_counts
from pytest_geo.options import submission_meta
from pytest_geo.pytest_layer.budget import final_budget
from pytest_geo.pytest_layer.gate_reports import send_gate_reports
from pytest_geo.pytest_layer.state import MAX_ERROR_RATE, results_of, settings_of
from pytest_geo.report.egeo_submission import write_submission
from pytest_geo.report.gates import GateFailure, gate_failures
from pytest_geo.report.metadata import run_metadata
from pytest_geo.report.output import write_report_files
from pytest_geo.report.results import Results
from pytest_geo.report.terminal import run_notes, terminal_lines, written_lines
from pytest_geo.text import printable


def report_gates(session: pytest.Session) -> None:
    """Check the gates once every row has reported; each failing one becomes a failed
    test report (gate_reports.py), which also makes the exit status 1."""
    config = session.config
    results = results_of(config)
    take_final_budget(config, results)
    results.gates = gate_failures(results, fail_on_regression=config.getoption("geo_fail_on_regression"),
                                  max_error_rate=config.stash[MAX_ERROR_RATE])
    send_gate_reports(session, results.gates)


def take_final_budget(config: pytest.Config, results: Results) -> None:
    """What the run's processes spent together (every worker is done), with what workers
    that died had settled added to the usage as its own role: the run's cost is the
    ledger's."""
    results.budget = final_budget(config)
    if results.budget is not None and results.budget.lost_calls:
        results.usage[LOST_ROLE] = {**empty_counts(), **results.budget.lost_usage()}


REPORT_GATE = "pytest-geo::report"


def write_reports(session: pytest.Session, results: Results, started: float, duration: float) -> None:
    """Write the reports asked for. Paths were checked at start; a write that still fails
    (disk full) fails the run: a failed `pytest-geo::report` in the final line and the JUnit
    XML (when called as the test loop ends), exit status 1."""
    config = session.config
    results.metadata = run_metadata(settings_of(config), started, duration)
    take_final_budget(config, results)
    html_path = None if results.nothing_selected else config.getoption("geo_html")
    write_report_files(results, config.getoption("geo_report"), html_path, who="pytest-geo",
                       flags=("--geo-report", "--geo-html"))
    if config.getoption("geo_egeo_submission") and not results.nothing_selected:
        _write_submission(config, results)
    if results.write_errors:
        send_gate_reports(session, [GateFailure(REPORT_GATE, "; ".join(results.write_errors))])
        if session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _write_submission(config: pytest.Config, results: Results) -> None:
    """The E-GEO leaderboard's files (report/egeo_submission.py); a failure is a report's."""
    directory = config.getoption("geo_egeo_submission")
    settings = settings_of(config)
    try:
        meta = config.getoption("geo_submission_meta") or [
            submission_meta(line) for line in config.getini("geo_submission_meta") if line.strip()]
        write_submission(results, Path(directory), {j.name: j.model for j in settings.judges}, settings.models,
                         settings.variant_models, dict(meta))
    except argparse.ArgumentTypeError as exc:
        results.write_errors.append(f"pytest-geo: ini option geo_submission_meta: {exc}")
    except OSError as exc:
        results.write_errors.append(f"pytest-geo: --geo-egeo-submission: cannot write {directory}: "
                                    f"{exc.strerror or exc}")


def terminal_summary(config: pytest.Config, results: Results, terminalreporter: Any) -> None:
    if results.nothing_selected:
        return
    settings = settings_of(config)
    terminalreporter.write_sep("=", "pytest-geo evaluation")
    for error in results.write_errors:
        terminalreporter.write_line(error, red=True)
    # Where the reports went, together after the metrics (the Evals: block stays last).
    written = written_lines(results, (("--geo-report", "report", config.getoption("geo_report")),
                                      ("--geo-html", "HTML report", config.getoption("geo_html"))))
    for line in [*run_notes(results, settings.mock),
                 *terminal_lines(results, show_split=settings.split == "all", written=written)]:
        terminalreporter.write_line(printable(line))  # feedback holds model and dataset text
