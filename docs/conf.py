"""Sphinx configuration: Markdown pages (MyST), the options page generated from the option spec."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "_ext"))

project = "pytest-geo"
author = "the pytest-geo developers"
copyright = "2026, the pytest-geo developers"
extensions = ["myst_parser", "geo_options"]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build"]
myst_heading_anchors = 3
html_theme = "furo"
html_title = "pytest-geo"
# Warnings fail the build in CI (sphinx-build -W): a broken internal link is a warning.
suppress_warnings: list[str] = []
