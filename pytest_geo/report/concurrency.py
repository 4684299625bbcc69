"""The concurrency figures in the summary and the JSON report: plain data from
`llm.adaptive.ConcurrencyStats.as_json`, merged across xdist workers. Apart from the
engine, so the plugin's end of run never imports asyncio for them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def merge_stats(total: dict[str, Any] | None, other: Mapping[str, Any]) -> dict[str, Any]:
    """Add one process's stats to the run's: xdist workers each run their own controller
    at the same time, so limits, bounds and 429s add up."""
    if total is None:
        return dict(other)
    merged = dict(total)
    for name in ("limit", "reached", "rate_limited"):
        merged[name] = int(total.get(name) or 0) + int(other.get(name) or 0)
    for name in ("maximum", "start"):
        if total.get(name) is not None and other.get(name) is not None:
            merged[name] = int(total[name]) + int(other[name])
    return merged


def stats_line(stats: Mapping[str, Any]) -> str:
    """The terminal summary's line."""
    if stats.get("mode") == "auto":
        start, reached, limit = stats.get("start"), stats["reached"], stats["limit"]
        bound = f"(bound {stats.get('maximum')})"
        if start is None:  # stats from before `start` was recorded
            shape = f"auto, at most {_rows(reached)} in flight {bound}, ended at {limit}"
        elif reached > start:
            shape = f"auto, the limit rose from {start} to {_rows(reached)} in flight {bound}, ended at {limit}"
        elif limit < start:
            shape = f"auto, the limit fell from {start} to {_rows(limit)} in flight {bound}"
        else:
            shape = f"auto, the limit stayed at {_rows(start)} in flight {bound}"
    elif stats.get("mode") == "batch":
        shape = "batch (every row in its round)"
    else:
        shape = f"fixed at {_rows(stats['limit'])} in flight"
    return f"concurrency: {shape}; 429 answers seen: {stats['rate_limited']}"


def _rows(n: int) -> str:
    return f"{n} row" if n == 1 else f"{n} rows"
