"""optimize-prompts: the GEPA search, the tasks it optimises, the command's inputs and outputs."""

from __future__ import annotations

from typing import Any

from pytest_geo.llm.base import ChatClient
from pytest_geo.optimize.run import OptimizeOptions
from pytest_geo.optimize.search import OptimizeError
from pytest_geo.settings import Settings

__all__ = ["OptimizeError", "OptimizeOptions", "apply_refused", "optimize_prompts"]


def optimize_prompts(settings: Settings, options: OptimizeOptions, client: ChatClient | None = None) -> dict[str, Any]:
    """The `egeo optimize` command: a suites file's prompt procedures, or the GEO
    rewriter prompt over --train/--val rows; returns the JSON it prints (the E-GEO
    harness's result; with --suites, one per procedure by its name)."""
    if options.suites is not None:
        from pytest_geo.optimize.suite_task import optimize_suite_prompts

        return optimize_suite_prompts(settings, options, client)
    from pytest_geo.optimize.geo_task import optimize_prompts as optimize_rewriter

    return optimize_rewriter(settings, options, client)


def apply_refused(result: dict[str, Any]) -> bool:
    """--apply was asked for and refused because validation rows errored (the command
    then exits 1): in a result of the rewriter's, or of any suite procedure's."""
    results = [result] if "best" in result else list(result.values())
    return any(isinstance(r, dict) and r.get("apply_refused") for r in results)
