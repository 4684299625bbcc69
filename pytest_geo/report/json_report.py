"""The JSON report (`--geo-report`): aggregates, statistics, one record per row (its
model calls are in the transcripts file, report/transcripts.py), usage and run metadata;
written atomically, streamed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TextIO

from pytest_geo.data.files import write_text_atomic
from pytest_geo.data.record import RowRecord, is_scored
from pytest_geo.llm.usage import cost_json, endpoints_named
from pytest_geo.report.flags import flag_rates_by_suite, rates_json, red_team
from pytest_geo.report.noise import noise_floors
from pytest_geo.report.results import (
    REPORT_FORMAT_VERSION,
    Results,
    fact_violation_rate,
    order,
    statistics,
)
from pytest_geo.report.stopping import sequential_json
from pytest_geo.report.variants import compare_variants


def build_report(results: Results) -> dict[str, Any]:
    report = _build_report(results)
    report["geo"]["statistics"] = {
        "overall": statistics(results.geo_overall(), results.geo_clean_scores(), True),
        "datasets": {name: statistics(s.summary, s.clean_scores, True)
                     for name, s in results.geo_suite_results().items()},
    }
    _add_suite_extras(report["suites"], results.records)
    teams = red_team(results.records)
    if teams:
        report["redteam"] = [team.as_json() for team in teams]
    comparisons = compare_variants(results.records, results.suites())
    if comparisons:
        report["variants"] = [c.as_json() for c in comparisons]
    if results.metadata is not None:
        report["metadata"] = results.metadata
    if results.concurrency is not None:
        report["concurrency"] = results.concurrency
    if results.request_changes:
        report["request_changes"] = results.request_changes
    if endpoints_named(results.endpoint_usage):
        report["endpoint_usage"] = results.endpoint_usage
    if results.sequential is not None:
        items_run = sum(1 for r in results.records if r["kind"] == "geo")
        report["sequential"] = sequential_json(results.sequential, results.usage, items_run)
    if results.budget is not None:
        report["budget"] = results.budget.as_json()
    if results.baseline is not None:
        report["baseline"] = {"path": results.baseline_path, "suites": [c.as_json() for c in results.comparisons()],
                              "differences": results.baseline_differences}
    return report


def _add_suite_extras(suites: list[dict[str, Any]], records: list[RowRecord]) -> None:
    """Each suite's noise floor (with --geo-repeats K >= 2) and, with E-GEO's answers,
    how often the target was flagged."""
    floors = noise_floors(records)
    rates = flag_rates_by_suite(records)
    for suite in suites:
        floor = floors.get((suite["suite"], suite["split"]))
        if floor is not None:
            suite.update(floor.as_json())
        found = rates.get((suite["suite"], suite["split"]))
        if found is not None:
            suite["flag_rates"] = rates_json(found)


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
        "rows": sorted((r for r in results.records if is_scored(r)), key=order),
        "problems": sorted(results.problems, key=order),
        "usage": results.usage,
        "cost": cost_json(results.usage),
        "complete": results.complete,
        "not_run": results.not_run,
        "gates": [g.as_json() for g in results.gates],
    }


def _encoder() -> json.JSONEncoder:
    return json.JSONEncoder(indent=2, sort_keys=True, ensure_ascii=False, default=str, allow_nan=False)


def write_json(out: TextIO, payload: Any) -> None:
    """`json_text(payload)`, written piece by piece as the encoder makes it: a report of
    any size is never one string in memory."""
    for chunk in _encoder().iterencode(payload):
        out.write(chunk)
    out.write("\n")


def json_text(payload: Any) -> str:
    """Strict JSON: a NaN or infinity is a bug upstream (metrics and thresholds are checked
    to be finite), never a bare `NaN` token other JSON readers reject."""
    return _encoder().encode(payload) + "\n"


def write_json_atomic(path: Path, payload: Any) -> None:
    write_text_atomic(path, json_text(payload))
