"""Parsing model answers: a JSON object found in prose or code fences, then checked."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from typing import Any

from pytest_geo.text import shorten

FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.DOTALL)


class AnswerError(ValueError):
    """The model answered, but not with what was asked for; worth asking again."""


def extract_json_object(text: str, key: str | None = None) -> dict[str, Any]:
    """The answer object in `text`: the whole text when it is one JSON object; else the
    last fenced (```json) object holding `key`; else the last object anywhere in the text
    holding `key`; else the first object found (its missing key is then the error).

    Last, not first: a model that quotes a candidate's description before answering can
    quote an object injected into it (`{"ordered_ids": ["evil"]}`); the answer comes after.
    A fence is the model marking its answer, so it wins over objects in the prose."""
    whole = _loads_object(text.strip())
    if whole is not None:
        return whole
    fenced = [value for block in FENCE.findall(text) if (value := _loads_object(block)) is not None]
    inline = list(_objects_in(text))
    for candidates in (fenced, inline):
        fitting = [value for value in candidates if key is None or key in value]
        if fitting:
            return fitting[-1] if key is not None else fitting[0]
    if fenced or inline:
        return (fenced or inline)[0]
    raise AnswerError(f"no JSON object in the answer: {_preview(text)}")


def _loads_object(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _objects_in(text: str) -> Iterator[dict[str, Any]]:
    """Every JSON object that starts at some `{` of the text (nested ones too)."""
    decoder = json.JSONDecoder()
    for match in re.finditer(r"\{", text):
        try:
            value, _ = decoder.raw_decode(text, match.start())
        except ValueError:
            continue
        if isinstance(value, dict):
            yield value


def _preview(text: str, limit: int = 80) -> str:
    flat = " ".join(text.split())
    return repr(shorten(flat, limit))


def _id_text(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise AnswerError(f"ordered_ids holds {type(value).__name__} {value!r}, not an id")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value).strip()


def parse_ranking(text: str, candidate_ids: Sequence[str]) -> list[str]:
    """The ranker's `{"ordered_ids": [...]}`, which must be a permutation of the candidates."""
    answer = extract_json_object(text, "ordered_ids")
    if "ordered_ids" not in answer:
        raise AnswerError(f"answer has no 'ordered_ids' field (keys: {', '.join(map(str, answer)) or 'none'})")
    raw = answer["ordered_ids"]
    if not isinstance(raw, list):
        raise AnswerError(f"'ordered_ids' is {type(raw).__name__}, not a list")
    ordered = [_id_text(v) for v in raw]
    expected = list(candidate_ids)
    missing = [i for i in expected if i not in ordered]
    extra = [i for i in dict.fromkeys(ordered) if i not in expected]
    repeated = sorted({i for i in ordered if ordered.count(i) > 1})
    if missing or extra or repeated:
        parts = []
        if missing:
            parts.append("missing ids: " + ", ".join(missing))
        if extra:
            parts.append("extra ids: " + ", ".join(extra))
        if repeated:
            parts.append("repeated ids: " + ", ".join(repeated))
        raise AnswerError("ranking is not a permutation of the candidates (" + "; ".join(parts) + ")")
    return ordered


def parse_rewrite(text: str) -> str:
    """The rewriter's `{"rewritten_description": "..."}`, non-empty."""
    answer = extract_json_object(text, "rewritten_description")
    if "rewritten_description" not in answer:
        raise AnswerError(
            f"answer has no 'rewritten_description' field (keys: {', '.join(map(str, answer)) or 'none'})"
        )
    value = answer["rewritten_description"]
    if not isinstance(value, str):
        raise AnswerError(f"'rewritten_description' is {type(value).__name__}, not text")
    if not value.strip():
        raise AnswerError("'rewritten_description' is empty")
    return value.strip()
