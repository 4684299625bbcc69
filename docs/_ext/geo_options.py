"""Fills the options page from pytest_geo.option_spec, so it cannot drift from --help."""

from __future__ import annotations

from typing import Any

MARKER = "<!-- options-table -->"


def _fill(app: Any, docname: str, source: list[str]) -> None:
    if MARKER in source[0]:
        from pytest_geo.option_spec import options_markdown

        source[0] = source[0].replace(MARKER, options_markdown())


def setup(app: Any) -> dict[str, Any]:
    app.connect("source-read", _fill)
    return {"parallel_read_safe": True}
