"""The terminal summary: GEO metrics and statistics, fact violations, thresholds, the
baseline comparison, then Kedi's `Evals:` block, last."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pytest_geo.data.record import GEO_METRIC
from pytest_geo.llm.usage import cost_line, endpoints_named, usage_lines
from pytest_geo.report.concurrency import stats_line
from pytest_geo.report.flags import flag_rates_by_suite, rate_line, red_team
from pytest_geo.report.noise import NoiseFloor, noise_floors
from pytest_geo.report.numbers import format_ci, format_p
from pytest_geo.report.results import (
    GEO_METRICS,
    Results,
    fact_violation_rate,
    statistics,
)
from pytest_geo.report.stopping import sequential_json, sequential_lines
from pytest_geo.report.variants import compare_variants
from pytest_geo.scoring import Summary


def format_geo_line(label: str, summary: Summary, noise: NoiseFloor | None = None) -> str:
    """The E-GEO metrics; with repeats, the judge's noise beside the gain it qualifies."""
    metrics = summary.as_geo()

    def shown(name: str) -> str:
        text = f"{name}={float(metrics[name]):.4f}"
        if name == "avg_rank_improvement" and noise is not None:
            text += f" (judge noise {noise.mean:.4f})"
        return text

    return f"{label}: n={metrics['n']} " + " ".join(shown(name) for name in GEO_METRICS[1:])


def format_stats_line(summary: Summary, clean_scores: Iterable[float], errors: int = 0) -> str:
    stats = statistics(summary, clean_scores, geo=True)
    rate = errors / summary.n if summary.n else 0.0
    return (f"  ci95={format_ci(stats['ci95'])} up/unchanged/down={stats['moved_up']:.2f}/{stats['unchanged']:.2f}/"
            f"{stats['moved_down']:.2f} sign_test_p={format_p(stats['sign_test_p'])} "
            f"(over {stats['movement_n']} rows without error) errors={errors} error_rate={rate:.4f}")


def terminal_lines(results: Results, show_split: bool = False, written: Sequence[str] = ()) -> list[str]:
    """The GEO block, threshold verdicts, where the reports were `written`, then Kedi's
    `Evals:` block, last."""
    return [*geo_block_lines(results), *comparison_lines(results, show_split), *red_team_lines(results, show_split),
            *fact_lines(results),
            *suite_error_lines(results), *partial_lines(results), *baseline_lines(results), *written,
            *evals_lines(results, show_split)]


def geo_block_lines(results: Results) -> list[str]:
    """Each GEO suite's metrics, statistics and judge noise, then all GEO rows together."""
    lines = []
    floors = noise_floors(results.records)
    rates = flag_rates_by_suite(results.records)
    for name, suite in results.geo_suite_results().items():
        noise = floors.get((name, suite.split))
        lines += [format_geo_line(name, suite.summary, noise),
                  format_stats_line(suite.summary, suite.clean_scores, suite.errors)]
        if noise is not None:
            lines.append(noise.summary())
        if suite.panel is not None:
            lines += suite.panel.lines(name)
        if (suite.suite, suite.split) in rates:
            lines.append(rate_line(rates[(suite.suite, suite.split)]))
    # Pooled over suites; not over variants, which score the same rows again.
    if len(results.geo_suites()) > 1 and not any("variant" in r for r in results.records):
        lines.append(format_geo_line("all GEO rows", results.geo_overall()))
    return lines


def panel_lines(results: Results) -> list[str]:
    """The judges' figures of each GEO suite judged by a panel (--geo-judge)."""
    return [line for name, suite in results.geo_suite_results().items() if suite.panel is not None
            for line in suite.panel.lines(name)]


def comparison_lines(results: Results, show_split: bool = False) -> list[str]:
    """The variants' paired comparisons and the sequential decisions (both front ends)."""
    lines = [line for c in compare_variants(results.records, results.suites()) for line in c.lines(show_split)]
    if results.sequential is not None:
        items_run = sum(1 for r in results.records if r["kind"] == "geo")
        lines += sequential_lines(sequential_json(results.sequential, results.usage, items_run))
    return lines


def flag_lines(results: Results) -> list[str]:
    """`egeo`'s line per GEO suite whose rankers flagged: the flag rates (pytest prints
    them in the GEO block)."""
    rates = flag_rates_by_suite(results.records)
    return [f"{name}:{rate_line(rates[(suite.suite, suite.split)])[1:]}"
            for name, suite in results.geo_suite_results().items() if (suite.suite, suite.split) in rates]


def red_team_lines(results: Results, show_split: bool = False) -> list[str]:
    """Per packaged attack run as a variant: each judge's mean improvement and flag rate."""
    return [line for team in red_team(results.records) for line in team.lines(show_split)]


def suite_error_lines(results: Results) -> list[str]:
    return [f"errors: {suite.label} [{suite.split}]: {suite.errors} of {suite.summary.n} rows errored "
            f"(error_rate={suite.error_rate:.4f}), each scored 0.0"
            for suite in results.suites() if suite.errors and suite.metric != GEO_METRIC]


def partial_lines(results: Results) -> list[str]:
    lines = []
    if not results.complete:
        why = " (the budget was reached)" if results.budget_reached is not None else ""
        lines.append(f"partial run: {results.not_run} of {len(results.selected)} selected rows did not run{why}; "
                     "the scores cover only the rows that ran")
    if results.problems:
        lines.append(f"{len(results.problems)} malformed line(s) not scored (see the failures above)")
    return lines


def evals_lines(results: Results, show_split: bool) -> list[str]:
    """Kedi's block, never empty: none without suites."""
    suites = results.suites()
    lines = ["Evals:"] if suites else []
    for suite in suites:
        split = f" [{suite.split}]" if show_split else ""
        tail = f" | {suite.feedback}" if suite.feedback else ""
        lines.append(f"- {suite.label}{split}: {suite.summary.mean:.4f}{tail}")
    return lines


def run_notes(results: Results, mock: bool, price_option: str = "the ini option geo_prices") -> list[str]:
    """What the run spent and learned, as both front ends print it: model usage and cost,
    request changes, the budget, and the concurrency reached (the mock has neither cost
    nor rate limits)."""
    lines = []
    if results.usage:
        lines += ["model usage:", *(f"  {line}" for line in usage_lines(results.usage))]
        if not mock:
            lines.append(cost_line(results.usage, price_option=price_option))
    if endpoints_named(results.endpoint_usage):
        lines += ["model usage by endpoint:", *(f"  {line}" for line in usage_lines(results.endpoint_usage))]
    lines += request_change_lines(results.request_changes)
    if results.budget is not None:
        lines.append(results.budget.line())
    if results.concurrency is not None and not mock:
        lines.append(stats_line(results.concurrency))
    return lines


def written_lines(results: Results, reports: Sequence[tuple[str, str, str | None]]) -> list[str]:
    """Where the reports went: `reports` are (flag, kind, path) as asked for; a report whose
    write failed (its error names its flag) is not listed."""
    lines = [f"{kind} written to {path}" for flag, kind, path in reports
             if path and not any(flag in error for error in results.write_errors)]
    if results.transcripts_path is not None:
        lines.append(f"transcripts written to {results.transcripts_path}")
    return lines


def request_change_lines(changes: Sequence[Mapping[str, Any]]) -> list[str]:
    """What servers refused and how requests changed for it, once per model and parameter."""
    if not changes:
        return []
    return ["requests changed to what the server accepts:", *(f"  {change['text']}" for change in changes)]


def baseline_lines(results: Results) -> list[str]:
    comparisons = results.comparisons()
    if results.baseline is None:
        return []
    lines = [f"baseline {results.baseline_path}:"]
    lines += [f"  differs: {difference}" for difference in results.baseline_differences]
    for c in comparisons:
        lines.append(f"  {c.summary()}" + (" REGRESSION" if c.regression else ""))
    return lines


def fact_lines(results: Results) -> list[str]:
    return fact_rate_lines(*fact_violation_rate(results)[:2])


def fact_rate_lines(violating: int, total: int) -> list[str]:
    """The summary's no-new-facts line (none when no row produced a rewrite)."""
    if not total:
        return []
    rate = violating / total
    return [
        f"new facts: fact_violation_rate={rate:.4f} ({violating} of {total} rewrites add facts not in the original)"
    ]
