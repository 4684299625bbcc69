"""`{{placeholder}}` templates, as in the E-GEO harness's prompt files: finding the
placeholders and rendering in one pass. Shared by the GEO prompts and prompt procedures."""

from __future__ import annotations

import functools
import re
import string
from collections.abc import Mapping

PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


class PromptError(Exception):
    """A prompts directory that cannot be used; the message names the file."""


def placeholders(template: str) -> set[str]:
    return set(PLACEHOLDER.findall(template))


def render(template: str, values: Mapping[str, object]) -> str:
    """Substitute `{{name}}` in one pass: text coming from values is never re-scanned,
    so template syntax inside data (a description holding `{{title}}`) stays literal."""
    pieces = _pieces(template)
    out = list(pieces)
    for i in range(1, len(out), 2):
        name = out[i]
        if name not in values:
            raise KeyError(name)
        out[i] = str(values[name])
    return "".join(out)


@functools.lru_cache(maxsize=64)
def _pieces(template: str) -> tuple[str, ...]:
    """Text, name, text, name ... text: a template is scanned once, not once a row."""
    return tuple(PLACEHOLDER.split(template))


# E-GEO's own rewriting prompts are Python format strings with one field, `{description}`
# (the target product's text), and doubled braces for literal ones.
FORMAT_FIELD = re.compile(r"(?<!\{)\{description\}(?!\})")


def from_egeo_format(text: str) -> str:
    """An E-GEO rewriting prompt (`{description}`, str.format) as our template, so it runs
    unchanged: the field becomes the target's title and description; a template that
    already uses `{{placeholders}}`, or has no such field, is returned as it is."""
    if PLACEHOLDER.search(text) or not FORMAT_FIELD.search(text):
        return text
    pieces = []
    try:
        for literal, field, _spec, _conversion in string.Formatter().parse(text):
            pieces.append(literal)
            if field is None:
                continue
            if field != "description":
                raise PromptError(f"unknown field {{{field}}}: an E-GEO rewriting prompt has only {{description}}")
            pieces.append("{{title}}\n{{description}}")
    except ValueError as exc:
        raise PromptError(f"not a valid E-GEO (str.format) template: {exc}") from None
    return "".join(pieces)
