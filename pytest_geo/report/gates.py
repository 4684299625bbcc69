"""The run's gates: a suite below its threshold, a significant regression against the
baseline, too many errored rows. Each failing gate is one line with a node id of its own,
so the pytest layer can report it as a failed test where CI looks (the final line,
`-rf`, JUnit XML)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pytest_geo.report.baseline import Comparison
from pytest_geo.report.numbers import format_p
from pytest_geo.report.results import Results, SuiteResult

MODEL_SERVER_GATE = "pytest-geo::model_server"
BUDGET_GATE = "pytest-geo::budget"


@dataclass(frozen=True)
class GateFailure:
    nodeid: str  # `<suite>::threshold`, `<suite>::regression`, `<suite>::error_rate`
    message: str  # one line: why the gate failed
    gate: str = ""  # threshold, error_rate, regression, model_server, budget
    score: float | None = None  # the figure the gate judged (the score, the error rate)
    limit: str = ""  # what it was held to: "threshold 0.5000", "baseline 0.7500", ...

    def as_json(self) -> dict[str, Any]:
        return {"nodeid": self.nodeid, "message": self.message, "gate": self.gate, "score": self.score,
                "limit": self.limit}


def gate_nodeid(results: Results, suite: str, split: str, gate: str) -> str:
    """`<suite>::<gate>`, with the split when the suite reports more than one."""
    splits = {s.split for s in results.suites() if s.suite == suite}
    return f"{suite}::{gate}" + (f"[{split}]" if len(splits) > 1 else "")


def error_rate_failed(suite: SuiteResult, max_error_rate: float | None) -> bool:
    """Without a limit every errored row fails its own item, so there is nothing to add
    here; with one, errored rows are tolerated one by one and judged here per suite."""
    return max_error_rate is not None and suite.summary.n > 0 and suite.error_rate > max_error_rate


def gate_failures(results: Results, *, fail_on_regression: bool, max_error_rate: float | None) -> list[GateFailure]:
    failures = []
    if results.stopped is not None:
        failures.append(GateFailure(MODEL_SERVER_GATE, f"{results.stopped}; {results.not_run} row(s) not run",
                                    "model_server"))
    if results.budget_reached is not None:
        failures.append(GateFailure(BUDGET_GATE, f"{results.budget_reached}; {results.not_run} row(s) not run",
                                    "budget"))
    for suite in results.suites():
        failures.extend(_threshold_failures(results, suite))
        if error_rate_failed(suite, max_error_rate):
            failures.append(GateFailure(
                gate_nodeid(results, suite.suite, suite.split, "error_rate"),
                f"error_rate {suite.error_rate:.4f} > {max_error_rate:.4f} "
                f"({suite.errors} of {suite.summary.n} rows errored)",
                "error_rate", suite.error_rate, f"max error rate {max_error_rate:.4f}",
            ))
    if fail_on_regression:
        failures.extend(_regression_failure(results, c) for c in results.regressions())
    return failures


def _threshold_failures(results: Results, suite: SuiteResult) -> list[GateFailure]:
    if not suite.below_threshold:
        return []
    if suite.panel is None and not suite.judge_thresholds:
        return [GateFailure(
            gate_nodeid(results, suite.suite, suite.split, "threshold"),
            f"score {suite.summary.mean:.4f} < {suite.threshold:.4f} ({suite.label}, n={suite.summary.n})",
            "threshold", suite.summary.mean, f"threshold {suite.threshold:.4f}",
        )]
    # with judges: the panel's limit, and each judge's (SUITE@JUDGE)
    return [GateFailure(
        gate_nodeid(results, suite.suite, suite.split, "threshold" if who == "panel" else
                    f"threshold@{who.removeprefix('judge ')}"),
        f"{who} score {summary.mean:.4f} < {limit:.4f} ({suite.label}, n={summary.n})",
        "threshold", summary.mean, f"threshold {limit:.4f}",
    ) for who, summary, limit in suite.threshold_misses()]


def _regression_failure(results: Results, c: Comparison) -> GateFailure:
    nodeid = gate_nodeid(results, c.suite, c.split, "regression")
    limit = "baseline" + ("" if c.baseline_score is None else f" {c.baseline_score:.4f}")
    if c.sequential_drop:
        return GateFailure(
            nodeid,
            "dropped against the baseline: the sequential test decided the baseline better"
            + (f" (mean_diff={c.paired.mean_diff:+.4f} over {c.paired.n} paired rows)" if c.paired else ""),
            "regression", c.score, limit,
        )
    assert c.paired is not None  # a regression is a paired result
    return GateFailure(
        nodeid,
        f"dropped against the baseline: mean_diff={c.paired.mean_diff:+.4f} over {c.paired.n} paired rows, "
        f"sign_test_p={format_p(c.paired.sign_test_p)} < 0.05",
        "regression", c.score, limit,
    )
