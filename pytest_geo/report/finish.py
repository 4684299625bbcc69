"""The end of a run after the engine, shared by the plugin and `egeo`: what the closed
engine counted goes into the run's Results the same way on both."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_geo.llm.profiles import merge_lessons
from pytest_geo.llm.usage import merge_usage
from pytest_geo.report.concurrency import merge_stats
from pytest_geo.report.results import Results

if TYPE_CHECKING:
    from pytest_geo.engine.session import GeoSession


def take_counts(results: Results, geo: GeoSession) -> None:
    """The closed engine's model usage, concurrency and request changes, added to what
    `results` holds (under xdist, each worker's add up on the controller)."""
    merge_usage(results.usage, geo.usage_table())
    merge_usage(results.endpoint_usage, geo.endpoint_usage())
    if (stats := geo.concurrency_told()) is not None:
        results.concurrency = merge_stats(results.concurrency, stats)
    merge_lessons(results.request_changes, geo.request_changes())
