"""Parsing model answers: the JSON object found in them (llm/answer_json.py), checked.

Time is linear in the answer's length, whatever it holds: an answer is untrusted input,
parsed on the event loop every row shares.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any, NamedTuple

from pytest_geo.llm.answer_json import AnswerError, extract_json_object
from pytest_geo.llm.base import MAX_ANSWER_CHARS, ChatResponse
from pytest_geo.text import shorten

MAX_LISTED_IDS = 10
KEPT_PREFIX = 4096  # of an answer over MAX_ANSWER_CHARS, what a transcript keeps


class UnusableAnswer(Exception):
    """The answer cannot be used and asking again would not help: the output-token cap
    cut it, or it is over the answer size cap. The row fails with the reason."""


def check_answer(role: str, response: ChatResponse, cap: int | None, cap_flag: str) -> None:
    """Raise UnusableAnswer when `response` was cut at the output-token cap (`cap`, set
    with `cap_flag`) or is over MAX_ANSWER_CHARS; such an answer is never parsed."""
    if len(response.text) > MAX_ANSWER_CHARS:
        raise UnusableAnswer(f"{role} answer of {len(response.text):,} characters is over the answer size cap "
                             f"({MAX_ANSWER_CHARS:,} characters): not used")
    if response.finish_reason == "length":
        limit = f" ({cap_flag} {cap})" if cap is not None else ""
        raise UnusableAnswer(f"{role} answer cut at the output-token cap{limit}: raise it")


def kept_answer(text: str) -> str:
    """What a transcript keeps of an answer: all of it up to MAX_ANSWER_CHARS, else its
    first KEPT_PREFIX characters and a line saying it was cut."""
    if len(text) <= MAX_ANSWER_CHARS:
        return text
    return text[:KEPT_PREFIX] + f"\n[answer cut here in this report: {len(text):,} characters in all]"


class Judgement(NamedTuple):
    """A ranker's answer: the ids best first, and those it listed as questionable (E-GEO's
    `questionable_products`); `flagged` is None when the answer has no such field
    (the `ordered_ids` answer)."""

    order: list[str]
    flagged: frozenset[str] | None = None


def _id_text(value: Any, name: str = "ordered_ids") -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise AnswerError(f"{name} holds {type(value).__name__} {shorten(repr(value), 80)}, not an id")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value).strip()


def _listed(ids: Sequence[str]) -> str:
    shown = ", ".join(ids[:MAX_LISTED_IDS])
    return shown if len(ids) <= MAX_LISTED_IDS else f"{shown} and {len(ids) - MAX_LISTED_IDS:,} more"


def parse_ranking(text: str, candidate_ids: Sequence[str]) -> list[str]:
    """The ranker's `{"ordered_ids": [...]}`, which must be a permutation of the candidates."""
    answer = extract_json_object(text, "ordered_ids")
    if "ordered_ids" not in answer:
        raise AnswerError(f"answer has no 'ordered_ids' field (keys: {_keys(answer)})")
    return _permutation(answer["ordered_ids"], candidate_ids, "ordered_ids")


def parse_egeo_ranking(text: str, candidate_ids: Sequence[str]) -> Judgement:
    """E-GEO's `{"ranking": [...], "questionable_products": [...]}`: the ranking a
    permutation of the candidates (numbers or strings), the questionable ones a list of
    them (missing: none; ids that are no candidate's are dropped)."""
    answer = extract_json_object(text, "ranking")
    if "ranking" not in answer:
        raise AnswerError(f"answer has no 'ranking' field (keys: {_keys(answer)})")
    order = _permutation(answer["ranking"], candidate_ids, "ranking")
    raw = answer.get("questionable_products", [])
    if not isinstance(raw, list):
        raise AnswerError(f"'questionable_products' is {type(raw).__name__}, not a list")
    known = set(candidate_ids)
    return Judgement(order, frozenset(i for i in (_id_text(v, "questionable_products") for v in raw) if i in known))


def _permutation(raw: Any, candidate_ids: Sequence[str], name: str) -> list[str]:
    """`raw` as ids (JSON strings or numbers), which must be a permutation of the candidates."""
    if not isinstance(raw, list):
        raise AnswerError(f"'{name}' is {type(raw).__name__}, not a list")
    try:  # ids as JSON strings, the common case, read without a call each
        ordered = [value.strip() for value in raw]
    except AttributeError:  # a number, or what no id is (_id_text says which)
        ordered = [_id_text(v, name) for v in raw]
    expected = list(candidate_ids)
    given, known = set(ordered), set(expected)
    if given == known and len(ordered) == len(given) == len(expected):  # a permutation: nothing to list
        return ordered
    missing = [i for i in expected if i not in given]
    extra = [i for i in dict.fromkeys(ordered) if i not in known]
    repeated = sorted(i for i, count in Counter(ordered).items() if count > 1)
    if missing or extra or repeated:
        parts = []
        if missing:
            parts.append("missing ids: " + _listed(missing))
        if extra:
            parts.append("extra ids: " + _listed(extra))
        if repeated:
            parts.append("repeated ids: " + _listed(repeated))
        raise AnswerError("ranking is not a permutation of the candidates (" + "; ".join(parts) + ")")
    return ordered


def _keys(answer: dict[str, Any]) -> str:
    return shorten(", ".join(map(str, answer)), 200) or "none"


def parse_rewrite(text: str) -> str:
    """The rewriter's `{"rewritten_description": "..."}`, non-empty."""
    answer = extract_json_object(text, "rewritten_description")
    if "rewritten_description" not in answer:
        raise AnswerError(f"answer has no 'rewritten_description' field (keys: {_keys(answer)})")
    value = answer["rewritten_description"]
    if not isinstance(value, str):
        raise AnswerError(f"'rewritten_description' is {type(value).__name__}, not text")
    if not value.strip():
        raise AnswerError("'rewritten_description' is empty")
    return value.strip()
