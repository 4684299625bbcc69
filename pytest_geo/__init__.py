"""pytest-geo: LLM prompt evaluations (E-GEO rank experiments, eval suites) as pytest runs."""

from __future__ import annotations

__all__ = [
    "GeoOutcome",
    "GeoRow",
    "Metric",
    "PromptProcedure",
    "Score",
    "Suite",
    "SuiteError",
    "Summary",
    "__version__",
    "normalize",
    "prompt",
    "suite",
    "summarize",
]

from pytest_geo.data.dataset import GeoRow
from pytest_geo.scoring import Score, Summary, normalize, summarize
from pytest_geo.suites.procedures import PromptProcedure, prompt
from pytest_geo.suites.suite import Metric, Suite, SuiteError, suite

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    """`GeoOutcome` on first use: importing the engine (asyncio, the fact checker) costs
    every pytest run that loads the plugin."""
    if name == "GeoOutcome":
        from pytest_geo.engine.experiment import GeoOutcome

        return GeoOutcome
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
