"""`egeo merge`: JSON reports of shards of one run (`--geo-shard K/N`), or of runs over
disjoint rows with the same settings, as one report. The rows (with their transcripts,
read back from the files beside the reports) are aggregated again by the code that
aggregates a run, so every figure equals one run over all the rows."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, cast

from pytest_geo.data.record import RowRecord
from pytest_geo.llm.usage import merge_usage
from pytest_geo.report.results import Results
from pytest_geo.report.transcripts import with_transcript

# What must be equal for reports to be one run's parts (report/metadata.py's run identity).
SAME = ("models", "mock", "base_url_host", "prompts_sha256", "seed", "repeats", "variants")


class MergeError(Exception):
    """Reports that cannot be merged; the message names the files and why."""


def _load(path: Path) -> dict[str, Any]:
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise MergeError(f"{path}: cannot read the report: {exc}") from None
    if not isinstance(report, dict) or not isinstance(report.get("rows"), list):
        raise MergeError(f"{path}: not a pytest-geo JSON report (no rows)")
    return report


def _transcripts(path: Path, report: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(node id, transcript line) from the transcripts file beside a report, if any."""
    written = report.get("transcripts")
    if not isinstance(written, dict) or not isinstance(written.get("path"), str):
        return
    beside = path.parent / Path(written["path"]).name
    try:
        with gzip.open(beside, "rt", encoding="utf-8") as lines:
            for text in lines:
                line = json.loads(text)
                yield line["nodeid"], line
    except (OSError, EOFError, ValueError, KeyError, TypeError) as exc:
        raise MergeError(f"{beside}: cannot read the transcripts file: {exc}") from None


def _identity(report: dict[str, Any]) -> dict[str, Any]:
    metadata = report.get("metadata") or {}
    return {name: metadata.get(name) for name in SAME}


def merge_reports(paths: Sequence[Path]) -> Results:
    """The merged run's results; MergeError for reports of different settings, or that
    hold the same row twice."""
    results = Results()
    first: tuple[Path, dict[str, Any]] | None = None
    seen: dict[str, Path] = {}
    for path in paths:
        report = _load(path)
        if report.get("not_run"):
            raise MergeError(f"{path}: a partial run ({report['not_run']} selected rows did not run): run that "
                             "part again before merging")
        identity = _identity(report)
        if first is None:
            first = (path, identity)
            results.metadata = report.get("metadata")
        else:
            differ = [name for name in SAME if identity[name] != first[1][name]]
            if differ:
                raise MergeError(f"{path} and {first[0]} were made with different settings ({', '.join(differ)}): "
                                 "their rows do not make one run")
        calls = dict(_transcripts(path, report))
        for record in [*report["rows"], *report.get("problems", [])]:
            nodeid = record.get("nodeid")
            if nodeid in seen:
                raise MergeError(f"{path} and {seen[nodeid]} both hold the row {nodeid}: the reports overlap")
            seen[nodeid] = path
            results.add(cast(RowRecord, with_transcript(record, calls.get(nodeid))))
        merge_usage(results.usage, report.get("usage") or {})
        merge_usage(results.endpoint_usage, report.get("endpoint_usage") or {})
    results.selected = set(seen)
    return results
