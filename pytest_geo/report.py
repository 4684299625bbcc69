"""Collecting per-row records, aggregating them per suite, and reporting: the terminal
summary (GEO metrics, Kedi's `Evals:` block, thresholds) and the JSON report."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from pytest_geo.baseline import Comparison, compare
from pytest_geo.files import write_text_atomic
from pytest_geo.scoring import Summary, summarize
from pytest_geo.stats import confidence_interval, movement
from pytest_geo.suites import GEO_METRIC

REPORT_FORMAT_VERSION = 1
GEO_METRICS = ("n", "avg_rank_improvement", "win_rate", "stderr_rank_improvement")
FEEDBACK_LIMIT = 300
SCORED = ("geo", "suite")


@dataclass(frozen=True)
class SuiteResult:
    suite: str
    metric: str
    split: str
    summary: Summary
    feedback: str
    threshold: float | None
    scores: tuple[float, ...] = field(default=(), repr=False, compare=False)

    @property
    def label(self) -> str:
        return f"{self.suite}::{self.metric}"

    @property
    def below_threshold(self) -> bool:
        return self.threshold is not None and self.summary.mean < self.threshold

    def as_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "suite": self.suite, "metric": self.metric, "split": self.split, "n": self.summary.n,
            "score": self.summary.mean, "win_rate": self.summary.win_rate, "stderr": self.summary.stderr,
            "feedback": self.feedback, "threshold": self.threshold, "below_threshold": self.below_threshold,
        }
        if self.metric == GEO_METRIC:
            data.update(self.summary.as_geo())
        data.update(statistics(self.summary, self.scores, geo=self.metric == GEO_METRIC))
        return data


def statistics(summary: Summary, scores: Iterable[float], geo: bool) -> dict[str, Any]:
    """The 95% confidence interval of the mean; for GEO, how rows moved and the sign test."""
    ci = confidence_interval(summary.mean, summary.stderr, summary.n)
    data: dict[str, Any] = {"ci95": list(ci) if ci is not None else None}
    if geo:
        data.update(movement(scores).as_json())
    return data


def fold_feedback(feedback: Iterable[str], limit: int = FEEDBACK_LIMIT) -> str:
    """Join with '; ', repeated entries folded with a count, long text shortened with a
    count of what was left out."""
    counts: dict[str, int] = {}
    for text in feedback:
        text = " ".join(text.split())
        if text:
            counts[text] = counts.get(text, 0) + 1
    entries = [text if n == 1 else f"{text} (x{n})" for text, n in counts.items()]
    shown: list[str] = []
    for entry in entries:
        if len("; ".join([*shown, entry])) > limit and shown:
            break
        shown.append(entry if len(entry) <= limit else entry[: limit - 3] + "...")
    left = len(entries) - len(shown)
    return "; ".join(shown) + (f"; ... ({left} more)" if left else "")


@dataclass
class Results:
    """Records as they arrive from reports (locally or from xdist workers)."""

    records: list[dict[str, Any]] = field(default_factory=list)
    min_scores: dict[str, float] = field(default_factory=dict)
    usage: dict[str, dict[str, int]] = field(default_factory=dict)  # role -> counts (llm/usage.py)
    metadata: dict[str, Any] | None = None
    baseline: dict[str, Any] | None = None
    baseline_path: str | None = None
    # The summary, the thresholds, the baseline and both reports all read suites():
    # computed once per set of records, not once per reader.
    _suites: list[SuiteResult] | None = field(default=None, init=False, repr=False, compare=False)

    def add(self, record: dict[str, Any]) -> None:
        self.records.append(record)
        self._suites = None

    @property
    def empty(self) -> bool:
        return not self.records

    @property
    def problems(self) -> list[dict[str, Any]]:
        return [r for r in self.records if r["kind"] == "problem"]

    def suites(self) -> list[SuiteResult]:
        if self._suites is None:
            self._suites = self._aggregate()
        return self._suites

    def _aggregate(self) -> list[SuiteResult]:
        groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
        for record in self.records:
            if record["kind"] != "problem":
                groups.setdefault((record["suite"], record["metric"], record["split"]), []).append(record)
        results = []
        for (suite, metric, split), records in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][2] != "train")):
            scored = [r for r in sorted(records, key=_order) if r["kind"] in SCORED]
            threshold = self.min_scores.get(suite, records[0].get("threshold"))
            feedback = fold_feedback(r["feedback"] for r in scored) if scored else "no examples"
            values = tuple(float(r["score"]) for r in scored)
            results.append(SuiteResult(suite, metric, split, summarize(values), feedback, threshold, values))
        return results

    def geo_suites(self) -> dict[str, Summary]:
        return {name: s.summary for name, s in self.geo_suite_results().items()}

    def geo_suite_results(self) -> dict[str, SuiteResult]:
        """Keyed like `geo_suites()`, with the scores the statistics need."""
        return {s.suite: s for s in self.suites() if s.metric == GEO_METRIC}

    def geo_overall(self) -> Summary:
        return summarize(r["score"] for r in self.records if r["kind"] == "geo")

    def below_threshold(self) -> list[SuiteResult]:
        return [s for s in self.suites() if s.below_threshold]

    def comparisons(self) -> list[Comparison]:
        if self.baseline is None:
            return []
        scored = [r for r in self.records if r["kind"] in SCORED]
        return compare([s.as_json() for s in self.suites()], scored, self.baseline)

    def regressions(self) -> list[Comparison]:
        return [c for c in self.comparisons() if c.regression]


def _order(record: Mapping[str, Any]) -> tuple[str, str, int, int]:
    return (record["suite"], record["split"], record.get("line") or 0, record.get("index") or 0)


def format_geo_line(label: str, summary: Summary) -> str:
    metrics = summary.as_geo()
    return f"{label}: n={metrics['n']} " + " ".join(f"{name}={float(metrics[name]):.4f}" for name in GEO_METRICS[1:])


def format_stats_line(summary: Summary, scores: Iterable[float]) -> str:
    stats = statistics(summary, scores, geo=True)
    ci = "n/a" if stats["ci95"] is None else "[{:.4f}, {:.4f}]".format(*stats["ci95"])
    return (f"  ci95={ci} up/unchanged/down={stats['moved_up']:.2f}/{stats['unchanged']:.2f}/"
            f"{stats['moved_down']:.2f} sign_test_p={stats['sign_test_p']:.4g}")


def terminal_lines(results: Results, show_split: bool = False) -> list[str]:
    """The GEO block, threshold verdicts, then Kedi's `Evals:` block, last."""
    lines = []
    for name, suite in results.geo_suite_results().items():
        lines += [format_geo_line(name, suite.summary), format_stats_line(suite.summary, suite.scores)]
    if len(results.geo_suites()) > 1:
        lines.append(format_geo_line("all GEO rows", results.geo_overall()))
    lines += fact_lines(results)
    if results.problems:
        lines.append(f"{len(results.problems)} malformed line(s) not scored (see the failures above)")
    for failed in results.below_threshold():
        lines.append(
            f"FAILED threshold: {failed.label} scored {failed.summary.mean:.4f}, below its threshold {failed.threshold:.4f}"
        )
    lines += baseline_lines(results)
    lines.append("Evals:")
    for suite in results.suites():
        split = f" [{suite.split}]" if show_split else ""
        tail = f" | {suite.feedback}" if suite.feedback else ""
        lines.append(f"- {suite.label}{split}: {suite.summary.mean:.4f}{tail}")
    return lines


def baseline_lines(results: Results) -> list[str]:
    comparisons = results.comparisons()
    if results.baseline is None:
        return []
    lines = [f"baseline {results.baseline_path}:"]
    for c in comparisons:
        lines.append(f"  {c.summary()}")
    for c in comparisons:
        if c.regression and c.paired is not None:
            lines.append(f"REGRESSION: {c.label} dropped against the baseline "
                         f"(mean_diff={c.paired.mean_diff:+.4f}, sign_test_p={c.paired.sign_test_p:.4g})")
    return lines


def junit_properties(record: Mapping[str, Any]) -> list[tuple[str, object]]:
    """What a row's JUnit XML test case carries (values become text there)."""
    names: tuple[str, ...]
    if record["kind"] == "geo":
        names = ("score", "rank_before", "rank_after", "rank_improvement", "feedback")
    elif record["kind"] == "suite":
        names = ("score", "feedback")
    else:
        return []
    return [(name, "" if record.get(name) is None else record[name]) for name in names]


def build_report(results: Results) -> dict[str, Any]:
    report = _build_report(results)
    report["geo"]["statistics"] = {
        "overall": statistics(results.geo_overall(), [r["score"] for r in results.records if r["kind"] == "geo"], True),
        "datasets": {name: statistics(s.summary, s.scores, True) for name, s in results.geo_suite_results().items()},
    }
    if results.metadata is not None:
        report["metadata"] = results.metadata
    if results.baseline is not None:
        report["baseline"] = {"path": results.baseline_path, "suites": [c.as_json() for c in results.comparisons()]}
    return report


def _build_report(results: Results) -> dict[str, Any]:
    suites = results.suites()
    return {
        "format_version": REPORT_FORMAT_VERSION,
        "suites": [s.as_json() for s in suites],
        "geo": {
            "overall": results.geo_overall().as_geo(),
            "datasets": {name: s.as_geo() for name, s in results.geo_suites().items()},
            "fact_violation_rate": fact_violation_rate(results)[2],
        },
        "rows": sorted((r for r in results.records if r["kind"] in SCORED), key=_order),
        "problems": sorted(results.problems, key=_order),
        "usage": results.usage,
    }


def write_json_atomic(path: Path, payload: Any) -> None:
    write_text_atomic(path, json.dumps(payload, indent=2, sort_keys=True, ensure_ascii=False, default=str) + "\n")


def fact_violation_rate(results: Results) -> tuple[int, int, float]:
    """(rewrites with new facts, rewrites, share): only rows that produced a rewrite count."""
    rewrites = [r for r in results.records if r["kind"] == "geo" and r.get("rewritten_description") is not None]
    violating = sum(1 for r in rewrites if r.get("fact_violations"))
    return violating, len(rewrites), (violating / len(rewrites) if rewrites else 0.0)


def fact_lines(results: Results) -> list[str]:
    return fact_rate_lines(*fact_violation_rate(results)[:2])


def fact_rate_lines(violating: int, total: int) -> list[str]:
    """The summary's no-new-facts line (none when no row produced a rewrite)."""
    if not total:
        return []
    rate = violating / total
    return [f"new facts: fact_violation_rate={rate:.4f} ({violating} of {total} rewrites add facts not in the original)"]
