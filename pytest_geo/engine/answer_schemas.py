"""The JSON Schemas of the answers each role is asked for, sent as strict structured
outputs (`ChatRequest.response_schema`; OpenAI's `response_format` `json_schema` with
`strict: true`), so a server that supports them can only answer in that shape.

Strict mode takes a subset of JSON Schema: every object closed (`additionalProperties:
false`) with every property in `required`; `enum`, `minItems` and `maxItems` are kept. A
schema's `title` is its name (letters, digits, `_` and `-`, at most 64). The answers are
still parsed leniently (engine/answers.py): a server without structured outputs, or a
prompt directory written for the E-GEO harness, gets the same parsing as before."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

# OpenAI's documented limits: at most 1,000 enum values in a schema, and a string enum
# of more than 250 values at most 15,000 characters in all. Past them the ids go
# without an enum (the count still holds, and parsing checks the ids).
MAX_ENUM_VALUES = 1000
LONG_ENUM = 250
MAX_LONG_ENUM_CHARS = 15_000


def _closed(title: str, properties: Mapping[str, Any]) -> dict[str, Any]:
    return {"title": title, "type": "object", "properties": dict(properties), "required": list(properties),
            "additionalProperties": False}


def ranking_schema(candidate_ids: Sequence[str]) -> dict[str, Any]:
    """`{"ordered_ids": [...]}`: each of the row's candidate ids, as many as there are."""
    ids = list(candidate_ids)
    items: dict[str, Any] = {"type": "string"}
    if _enum_fits(ids):
        items["enum"] = ids
    ordered = {"type": "array", "items": items, "minItems": len(ids), "maxItems": len(ids)}
    return _closed("ranking", {"ordered_ids": ordered})


def egeo_ranking_schema(candidate_ids: Sequence[str]) -> dict[str, Any]:
    """E-GEO's `{"ranking": [...], "questionable_products": [...]}`: every candidate in the
    ranking, any of them (or none) questionable; numbers when the ids are (E-GEO's products
    are numbered), else the ids' text."""
    ids: list[Any] = list(candidate_ids)
    items: dict[str, Any] = {"type": "string"}
    if all(_is_number(i) for i in candidate_ids):
        ids, items = [int(i) for i in candidate_ids], {"type": "integer"}
    if _enum_fits(list(map(str, ids))):
        items["enum"] = ids
    ranking = {"type": "array", "items": items, "minItems": len(ids), "maxItems": len(ids)}
    questionable = {"type": "array", "items": dict(items), "maxItems": len(ids)}
    return _closed("egeo_ranking", {"ranking": ranking, "questionable_products": questionable})


def rewrite_schema() -> dict[str, Any]:
    """`{"rewritten_description": "..."}`."""
    return _closed("rewrite", {"rewritten_description": {"type": "string"}})


def proposal_schema() -> dict[str, Any]:
    """The meta-optimizer's `{"new_prompt": "...", "rationale": "..."}`."""
    return _closed("prompt_proposal", {"new_prompt": {"type": "string"}, "rationale": {"type": "string"}})


def _is_number(text: str) -> bool:
    return text.isascii() and text.isdigit() and str(int(text)) == text


def _enum_fits(ids: Sequence[str]) -> bool:
    if len(ids) > MAX_ENUM_VALUES:
        return False
    return len(ids) <= LONG_ENUM or sum(len(i) for i in ids) <= MAX_LONG_ENUM_CHARS
