"""pytest-geo: LLM prompt evaluations (E-GEO rank experiments, eval suites) as pytest runs."""

from __future__ import annotations

__all__ = ["GeoOutcome", "GeoRow", "Score", "Summary", "__version__", "normalize", "summarize"]

from pytest_geo.data import GeoRow
from pytest_geo.geo import GeoOutcome
from pytest_geo.scoring import Score, Summary, normalize, summarize

__version__ = "0.1.0"
