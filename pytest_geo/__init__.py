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

from pytest_geo.data import GeoRow
from pytest_geo.geo import GeoOutcome
from pytest_geo.procedures import PromptProcedure, prompt
from pytest_geo.scoring import Score, Summary, normalize, summarize
from pytest_geo.suites import Metric, Suite, SuiteError, suite

__version__ = "0.1.0"
