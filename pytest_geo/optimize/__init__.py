"""optimize-prompts: the GEPA search, the tasks it optimises, the command's inputs and outputs."""

from __future__ import annotations

from pytest_geo.llm.base import ChatClient
from pytest_geo.optimize.run import OptimizeOptions
from pytest_geo.optimize.search import OptimizeError
from pytest_geo.settings import Settings

__all__ = ["OptimizeError", "OptimizeOptions", "optimize_prompts"]


def optimize_prompts(settings: Settings, options: OptimizeOptions, client: ChatClient | None = None) -> int:
    """The `egeo optimize-prompts` command: a suites file's prompt procedures, or the GEO
    rewriter prompt over --train/--val rows; returns the exit status."""
    if options.suites is not None:
        from pytest_geo.optimize.suite_task import optimize_suite_prompts

        return optimize_suite_prompts(settings, options, client)
    from pytest_geo.optimize.geo_task import optimize_prompts as optimize_rewriter

    return optimize_rewriter(settings, options, client)
