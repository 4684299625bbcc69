"""A run's results: the row records as they arrive (locally or from xdist workers),
aggregated per suite, with thresholds and the baseline comparison."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from pytest_geo.data.record import GEO_METRIC, RowRecord, is_scored
from pytest_geo.report.baseline import Comparison, compare
from pytest_geo.report.judges import Panel, panel_of
from pytest_geo.report.stats import confidence_interval, is_proportion, movement, wilson_interval
from pytest_geo.report.transcripts import TranscriptSpool
from pytest_geo.scoring import Summary, summarize
from pytest_geo.text import shorten

if TYPE_CHECKING:
    from pytest_geo.llm.ledger import BudgetStatus
    from pytest_geo.report.gates import GateFailure
    from pytest_geo.report.stopping import Monitor

REPORT_FORMAT_VERSION = 2  # 2: rows' calls moved to the transcripts file (report/transcripts.py)
GEO_METRICS = ("n", "avg_rank_improvement", "win_rate", "stderr_rank_improvement")
FEEDBACK_LIMIT = 300


@dataclass(frozen=True)
class SuiteResult:
    suite: str
    metric: str
    split: str
    summary: Summary
    feedback: str
    threshold: float | None
    scores: tuple[float, ...] = field(default=(), repr=False, compare=False)
    errors: int = 0
    # The scores of rows that ran without error: movement and sign tests read only these,
    # so a burst of failed calls (scored 0.0) never reads as "unchanged" or as a drop.
    clean_scores: tuple[float, ...] = field(default=(), repr=False, compare=False)
    # With --geo-judge: each judge's figures, the panel's and the agreement (report/judges.py),
    # and `--geo-min-score SUITE@JUDGE=VALUE`'s limits by judge.
    panel: Panel | None = field(default=None, repr=False, compare=False)
    judge_thresholds: dict[str, float] = field(default_factory=dict, repr=False, compare=False)

    @property
    def label(self) -> str:
        return f"{self.suite}::{self.metric}"

    @property
    def gated(self) -> Summary:
        """What --geo-min-score holds to: the panel's figures with judges, else the suite's."""
        return self.panel.panel if self.panel is not None else self.summary

    def threshold_misses(self) -> list[tuple[str, Summary, float]]:
        """(who: "score", "panel" or "judge NAME"; their figures; the limit) for each limit missed."""
        misses: list[tuple[str, Summary, float]] = []
        if self.threshold is not None and self.gated.mean < self.threshold:
            misses.append(("panel" if self.panel is not None else "score", self.gated, self.threshold))
        for judge, limit in self.judge_thresholds.items():
            summary = self.panel.judges.get(judge) if self.panel is not None else None
            if summary is None or summary.mean < limit:
                misses.append((f"judge {judge}", summary or summarize(()), limit))
        return misses

    @property
    def below_threshold(self) -> bool:
        if self.panel is None and not self.judge_thresholds:  # the common case, as before judges
            return self.threshold is not None and self.summary.mean < self.threshold
        return bool(self.threshold_misses())

    @property
    def error_rate(self) -> float:
        return self.errors / self.summary.n if self.summary.n else 0.0

    def as_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "suite": self.suite, "metric": self.metric, "split": self.split, "n": self.summary.n,
            "score": self.summary.mean, "win_rate": self.summary.win_rate, "stderr": self.summary.stderr,
            "feedback": self.feedback, "threshold": self.threshold, "below_threshold": self.below_threshold,
            "errors": self.errors, "error_rate": self.error_rate,
        }
        if self.metric == GEO_METRIC:
            data.update(self.summary.as_geo())
        data.update(statistics(self.summary, self.clean_scores, geo=self.metric == GEO_METRIC))
        if self.panel is not None:
            data.update(self.panel.as_json())
        if self.judge_thresholds:
            data["judge_thresholds"] = dict(self.judge_thresholds)
        return data


def statistics(summary: Summary, clean_scores: Iterable[float], geo: bool) -> dict[str, Any]:
    """The 95% confidence interval of the mean (over every row, errors as 0.0); for GEO,
    how rows moved and the sign test, over the rows that ran without error only
    (`movement_n` says how many).

    A suite whose scores are all 0 or 1 scores a proportion, bounded by [0, 1]: its
    interval is Wilson's, which stays within the bounds (a t interval of 3 rows of 0/1
    can read [-0.77, 2.10]); an errored row is a 0 among the n. GEO rank improvements
    are unbounded: always t."""
    values = [float(s) for s in clean_scores]
    if not geo and is_proportion(values):
        ci, method = wilson_interval(sum(1 for v in values if v == 1.0), summary.n), "wilson"
    else:
        ci, method = confidence_interval(summary.mean, summary.stderr, summary.n), "t"
    data: dict[str, Any] = {"ci95": list(ci) if ci is not None else None, "ci95_method": method}
    if geo:
        moved = movement(values)
        data.update(moved.as_json())
        data["movement_n"] = moved.n
    return data


def has_error(record: RowRecord) -> bool:
    return record.get("error") is not None


def fold_feedback(feedback: Iterable[str], limit: int = FEEDBACK_LIMIT) -> str:
    """Join with '; ', repeated entries folded with a count, long text shortened with a
    count of what was left out."""
    counts: dict[str, int] = {}
    for text, n in Counter(feedback).items():  # counted as given first: most rows repeat a few texts
        text = " ".join(text.split())
        if text:
            counts[text] = counts.get(text, 0) + n
    entries = [text if n == 1 else f"{text} (x{n})" for text, n in counts.items()]
    shown: list[str] = []
    for entry in entries:
        if len("; ".join([*shown, entry])) > limit and shown:
            break
        shown.append(shorten(entry, limit))
    left = len(entries) - len(shown)
    return "; ".join(shown) + (f"; ... ({left} more)" if left else "")


@dataclass
class Results:
    """Records as they arrive from reports (locally or from xdist workers)."""

    records: list[RowRecord] = field(default_factory=list)
    min_scores: dict[str, float] = field(default_factory=dict)
    usage: dict[str, dict[str, int]] = field(default_factory=dict)  # role -> counts (llm/usage.py)
    # endpoint -> counts over its roles (`default`: the default server); shown once a
    # model names an endpoint, so a user paying several providers sees each one's share
    endpoint_usage: dict[str, dict[str, int]] = field(default_factory=dict)
    concurrency: dict[str, Any] | None = None  # reached and 429s seen (llm/adaptive.py)
    # What servers refused and how requests changed, once per model and parameter (llm/healing.py)
    request_changes: list[dict[str, Any]] = field(default_factory=list)
    metadata: dict[str, Any] | None = None
    baseline: dict[str, Any] | None = None
    baseline_path: str | None = None
    baseline_differences: list[str] = field(default_factory=list)  # how the baseline's run differs from this one
    gates: list[GateFailure] = field(default_factory=list)  # failed gates, set once every row reported
    # Node ids of the selected pytest-geo items (set after collection): the rows a
    # complete run reports. Ctrl-C, -x, --maxfail, a stopped model server or the budget leave some out.
    selected: set[str] = field(default_factory=set)
    stopped: str | None = None  # why the model server stopped being called (llm/breaker.py)
    # --geo-sequential: the comparisons and the rows their decisions made unnecessary
    # (skipped, never scored, and not counted as rows that did not run).
    sequential: Monitor | None = None
    not_needed: set[str] = field(default_factory=set)
    budget: BudgetStatus | None = None  # --geo-budget: spent, and why it stopped calls (llm/budget.py)
    write_errors: list[str] = field(default_factory=list)  # reports that could not be written, one line each
    transcripts_path: str | None = None  # the transcripts file written beside a report (report/output.py)
    # Where each arriving record's calls go (report/transcripts.py): without one they stay
    # on the records (library use) until the reports are written.
    transcripts: TranscriptSpool | None = None
    # The summary, the thresholds, the baseline and both reports all read suites():
    # computed once per set of records, not once per reader.
    _suites: list[SuiteResult] | None = field(default=None, init=False, repr=False, compare=False)

    def add(self, record: RowRecord) -> None:
        if self.transcripts is not None:
            record = self.transcripts.take(record)
        self.records.append(record)
        self._suites = None

    def spool(self) -> TranscriptSpool:
        """The transcripts spool, with the calls of records added without one taken in."""
        if self.transcripts is None:
            self.transcripts = TranscriptSpool()
            for record in self.records:
                self.transcripts.take(record)
        return self.transcripts

    @property
    def empty(self) -> bool:
        return not self.records

    @property
    def nothing_selected(self) -> bool:
        """A run without pytest-geo rows: no summary, no HTML."""
        return not self.records and not self.selected

    @property
    def not_run(self) -> int:
        """Selected rows that never reported a result (and were needed)."""
        return len(self.selected - {r["nodeid"] for r in self.records} - self.not_needed)

    @property
    def complete(self) -> bool:
        return self.not_run == 0

    @property
    def budget_reached(self) -> str | None:
        return self.budget.reached if self.budget is not None else None

    @property
    def problems(self) -> list[RowRecord]:
        return [r for r in self.records if r["kind"] == "problem"]

    def suites(self) -> list[SuiteResult]:
        if self._suites is None:
            self._suites = self._aggregate()
        return self._suites

    def _aggregate(self) -> list[SuiteResult]:
        groups: dict[tuple[str, str, str], list[RowRecord]] = {}
        for record in self.records:
            if record["kind"] != "problem":
                groups.setdefault((record["suite"], record["metric"], record["split"]), []).append(record)
        results = []
        for (suite, metric, split), records in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][2] != "train")):
            scored = [r for r in sorted(records, key=order) if is_scored(r)]
            threshold = self.min_scores.get(suite, records[0].get("threshold"))
            feedback = fold_feedback([r["feedback"] for r in scored]) if scored else "no examples"
            values = tuple([float(r["score"]) for r in scored])
            clean = tuple([float(r["score"]) for r in scored if not has_error(r)])
            panel = panel_of(scored) if metric == GEO_METRIC else None
            limits = {key.partition("@")[2]: value for key, value in self.min_scores.items()
                      if key.startswith(f"{suite}@")}
            results.append(SuiteResult(suite, metric, split, summarize(values), feedback, threshold, values,
                                       errors=len(values) - len(clean), clean_scores=clean, panel=panel,
                                       judge_thresholds=limits))
        return results

    def geo_suites(self) -> dict[str, Summary]:
        return {name: s.summary for name, s in self.geo_suite_results().items()}

    def geo_suite_results(self) -> dict[str, SuiteResult]:
        """Keyed like `geo_suites()`, with the scores the statistics need."""
        return {s.suite: s for s in self.suites() if s.metric == GEO_METRIC}

    def geo_scores(self) -> list[float]:
        return [r["score"] for r in self.records if r["kind"] == "geo"]

    def geo_clean_scores(self) -> list[float]:
        """GEO rows that ran without error: what movement and the sign test read."""
        return [r["score"] for r in self.records if r["kind"] == "geo" and not has_error(r)]

    def geo_overall(self) -> Summary:
        return summarize(self.geo_scores())

    def below_threshold(self) -> list[SuiteResult]:
        return [s for s in self.suites() if s.below_threshold]

    def comparisons(self) -> list[Comparison]:
        if self.baseline is None:
            return []
        scored = [r for r in self.records if is_scored(r)]
        comparisons = compare([s.as_json() for s in self.suites()], scored, self.baseline)
        if self.sequential is None:
            return comparisons
        drops = self.sequential.baseline_drops()
        return [replace(c, sequential_drop=drops[(c.suite, c.split)]) if (c.suite, c.split) in drops else c
                for c in comparisons]

    def regressions(self) -> list[Comparison]:
        return [c for c in self.comparisons() if c.regression]


def order(record: RowRecord) -> tuple[str, str, int, int]:
    """Report order: by suite, split, then the row's line (GEO) or index (suite rows)."""
    return (record["suite"], record["split"], record["line"], record.get("index", 0))


def fact_violation_rate(results: Results) -> tuple[int, int, float]:
    """(rewrites with new facts, rewrites, share): only rows that produced a rewrite count."""
    rewrites = [r for r in results.records if r["kind"] == "geo" and r.get("rewritten_description") is not None]
    violating = sum(1 for r in rewrites if r.get("fact_violations"))
    return violating, len(rewrites), (violating / len(rewrites) if rewrites else 0.0)
