"""Collecting per-row records, aggregating them, and reporting: terminal lines and JSON."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_geo.scoring import Summary, summarize

REPORT_FORMAT_VERSION = 1
GEO_METRICS = ("n", "avg_rank_improvement", "win_rate", "stderr_rank_improvement")


@dataclass
class Results:
    """Records as they arrive from reports (locally or from xdist workers)."""

    rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    problems: list[dict[str, Any]] = field(default_factory=list)
    usage: dict[str, dict[str, int]] = field(default_factory=dict)  # role -> counts (llm/usage.py)

    def add(self, record: dict[str, Any]) -> None:
        if record.get("kind") == "problem":
            self.problems.append(record)
        else:
            self.rows.setdefault(record["dataset"], []).append(record)

    def dataset_summaries(self) -> dict[str, Summary]:
        return {name: summarize(r["score"] for r in rows) for name, rows in sorted(self.rows.items())}

    def overall(self) -> Summary:
        return summarize(r["score"] for rows in self.rows.values() for r in rows)

    @property
    def empty(self) -> bool:
        return not self.rows and not self.problems


def format_geo_line(label: str, summary: Summary) -> str:
    metrics = summary.as_geo()
    return f"{label}: n={metrics['n']} " + " ".join(
        f"{name}={float(metrics[name]):.4f}" for name in GEO_METRICS[1:]
    )


def terminal_lines(results: Results) -> list[str]:
    lines = [format_geo_line(name, summary) for name, summary in results.dataset_summaries().items()]
    if len(results.rows) > 1:
        lines.append(format_geo_line("all datasets", results.overall()))
    if results.problems:
        lines.append(f"{len(results.problems)} malformed line(s) not scored (see the failures above)")
    return lines


def build_report(results: Results) -> dict[str, Any]:
    rows = [r for _, dataset_rows in sorted(results.rows.items()) for r in dataset_rows]
    return {
        "format_version": REPORT_FORMAT_VERSION,
        "geo": {
            "overall": results.overall().as_geo(),
            "datasets": {name: s.as_geo() for name, s in results.dataset_summaries().items()},
        },
        "rows": sorted(rows, key=lambda r: (r["dataset"], r["line"])),
        "problems": sorted(results.problems, key=lambda r: (r["dataset"], r["line"])),
        "usage": results.usage,
    }


def write_json_atomic(path: Path, payload: Any) -> None:
    """Write beside the target, then rename: a reader never sees half a report."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(payload, handle, indent=2, sort_keys=True, ensure_ascii=False)
            handle.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
