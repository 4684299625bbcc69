"""Failed gates as failed test reports, sent through pytest's own report hook on the
process that aggregates (the only one under xdist that sees every row).

Sent when the test loop has finished, before `pytest_sessionfinish`: the terminal
reporter counts them in the final line (`1 failed, 8 passed`), `-rf` lists them with
their message, `--junitxml` (which writes its file in its own `pytest_sessionfinish`)
holds a failing test case per gate, and `session.testsfailed` makes the exit status 1."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from pytest_geo.report.gates import GateFailure


@dataclass(frozen=True)
class GateCrash:
    """Where `-rf` and `--tb=line` read a failure's one-line message."""

    path: str
    lineno: int
    message: str

    def __str__(self) -> str:
        return self.message


class GateRepr:
    """The failure text of a gate: one line, no traceback (nothing in the code failed)."""

    def __init__(self, failure: GateFailure) -> None:
        self.reprcrash = GateCrash(failure.nodeid.split("::")[0], 0, failure.message)

    def toterminal(self, out: object) -> None:
        out.line(self.reprcrash.message)  # type: ignore[attr-defined]

    def __str__(self) -> str:  # junitxml's failure text
        return self.reprcrash.message


def gate_reports(failure: GateFailure) -> list[pytest.TestReport]:
    """setup / call / teardown, as a test's would be: junitxml closes a test case on its
    teardown report, the terminal counts the failed call."""
    location = (failure.nodeid.split("::")[0], None, failure.nodeid)
    keywords: dict[str, int] = {"geo": 1, "geo_gate": 1}

    def report(when: str, outcome: str, longrepr: object = None) -> pytest.TestReport:
        return pytest.TestReport(failure.nodeid, location, keywords, outcome, longrepr, when)  # type: ignore[arg-type]

    return [report("setup", "passed"), report("call", "failed", GateRepr(failure)), report("teardown", "passed")]


def send_gate_reports(session: pytest.Session, failures: list[GateFailure]) -> None:
    hook = session.config.hook
    # Counted as collected, so the terminal's progress ends at 100%, not past it.
    session.testscollected += len(failures)
    for failure in failures:
        reports = gate_reports(failure)
        location = reports[0].location
        hook.pytest_runtest_logstart(nodeid=failure.nodeid, location=location)
        for report in reports:
            hook.pytest_runtest_logreport(report=report)
        hook.pytest_runtest_logfinish(nodeid=failure.nodeid, location=location)
