"""Text from datasets and models shown on a terminal: control characters escaped.

An ANSI escape, a NUL or a newline in a query id or a model's answer must not recolour,
clear or split the lines pytest prints; they are shown as escapes (`\\x1b`)."""

from __future__ import annotations

import re

# C0 and C1 controls, DEL, and the Unicode line and paragraph separators and bidi
# overrides, which reorder or break what a terminal shows.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def shorten(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, the last three `...` when it was longer."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def printable(text: str) -> str:
    """`text` with every control character written as its escape (`\\x0a`, `\\x1b`)."""
    return _CONTROL.sub(_escape, text)
