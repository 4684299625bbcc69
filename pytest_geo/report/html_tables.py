"""The cells and tables the HTML report's sections are made of (report/html_variants.py,
report/html_flags.py): every text escaped, numbers right-aligned by the `num` class."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape


def td(text: str, cls: str = "") -> str:
    attr = f' class="{cls}"' if cls else ""
    return f"<td{attr}>{escape(text)}</td>"


def html_table(cls: str, headers: Sequence[str], rows: Sequence[str]) -> str:
    """A table of `rows` already made (`<tr>...</tr>`) under escaped `headers`."""
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>\n' + "\n".join(rows) + "\n</tbody></table>"
