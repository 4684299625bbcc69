"""Parsing model answers: a JSON object found in prose or code fences, then checked.

Time is linear in the answer's length, whatever it holds: an answer is untrusted input,
parsed on the event loop every row shares (a quadratic search took 9 s on 100 KB of `{`).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from pytest_geo.llm.base import MAX_ANSWER_CHARS, ChatResponse
from pytest_geo.text import shorten

FENCE_OPEN = re.compile(r"```(?:json|JSON)?\s*+")
FENCE_CLOSE = "```"
# Where a JSON object can start: `{`, optional whitespace, then a key's quote or `}`. Any
# other `{` (prose, `{{`, a run of braces) cannot start one, so it is never tried.
OBJECT_START = re.compile(r"\{[ \t\n\r]*+[\"}]")
# A decode reads a window of the text, not the rest of it: a failed decode's error costs
# time in the position it names (json counts the lines before it). A window grows while
# the decode runs out of it; an error this close to a window's end may be the window's.
FIRST_WINDOW = 256
WINDOW_MARGIN = 16
# Reading budget of one search, in characters decoded: every attempt costs its span plus
# ATTEMPT_COST. An ordinary answer needs a fraction of it; only an answer built to make
# the search slow (thousands of half-objects) runs out, and is then unusable.
BUDGET_PER_CHAR = 4
BASE_BUDGET = 1 << 18
ATTEMPT_COST = 256
MAX_LISTED_IDS = 10
KEPT_PREFIX = 4096  # of an answer over MAX_ANSWER_CHARS, what a transcript keeps


class AnswerError(ValueError):
    """The model answered, but not with what was asked for; worth asking again."""


class UnusableAnswer(Exception):
    """The answer cannot be used and asking again would not help: the output-token cap
    cut it, or it is over the answer size cap. The row fails with the reason."""


class _OutOfBudget(Exception):
    pass


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


def extract_json_object(text: str, key: str | None = None) -> dict[str, Any]:
    """The answer object in `text`: the whole text when it is one JSON object; else the
    last fenced (```json) object holding `key`; else the last object anywhere in the text
    holding `key`; else the first object found (its missing key is then the error).

    Last, not first: a model that quotes a candidate's description before answering can
    quote an object injected into it (`{"ordered_ids": ["evil"]}`); the answer comes after.
    A fence is the model marking its answer, so it wins over objects in the prose.

    "An object anywhere" is one that starts at some `{` of the text, nested ones too. The
    search tries the places an object can start, from the end for the last one holding
    `key` and from the start for the first one, and stops at the first found.

    An object holding a lone surrogate (an escape such as `\\ud800` with no pair) is no
    answer: no report, transcript or later request could encode its text."""
    found = _extract(text, key)
    if SURROGATE_ESCAPE.search(text):
        try:
            json.dumps(found, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise AnswerError("the answer's JSON holds a lone surrogate (an escape such as \\ud800 with no pair), "
                              "not text") from None
    return found


SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _extract(text: str, key: str | None) -> dict[str, Any]:
    whole = _loads_whole(text.strip())
    if whole is not None:
        return whole
    fenced = [value for block in _fenced_blocks(text) if (value := _loads_object(block)) is not None]
    fitting = [value for value in fenced if key is not None and key in value]
    if fitting:
        return fitting[-1]
    search = _ObjectSearch(text)
    try:
        found = search.last_holding(key) if key is not None else None
        if found is None and not fenced:
            found = search.first()
    except _OutOfBudget:
        raise AnswerError(f"no usable JSON object found within the search's budget in {len(text):,} characters: "
                          f"{_preview(text)}") from None
    if found is not None:
        return found
    if fenced:
        return fenced[0]
    raise AnswerError(f"no JSON object in the answer: {_preview(text)}")


_DECODER = json.JSONDecoder()


def _loads_whole(text: str) -> dict[str, Any] | None:
    """`_loads_object` of a text with no whitespace around it (stripped), without the
    Python-level skipping of it that `json.loads` does on either side."""
    try:
        value, end = _DECODER.raw_decode(text)
    except (ValueError, RecursionError):  # as _loads_object
        return None
    return value if end == len(text) and isinstance(value, dict) else None


def _loads_object(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):  # nested deeper than Python's stack: not an answer
        return None
    return value if isinstance(value, dict) else None


def _fenced_blocks(text: str) -> Iterable[str]:
    """What each ``` fence (optionally ```json) holds, as the pattern
    ```(?:json|JSON)?\\s*(.*?)``` finds them, without its backtracking over whitespace
    (an unclosed fence then cost time in the square of the whitespace after it)."""
    position = 0
    while (opened := FENCE_OPEN.search(text, position)) is not None:
        closed = text.find(FENCE_CLOSE, opened.end())
        if closed < 0:
            return
        yield text[opened.end():closed]
        position = closed + len(FENCE_CLOSE)


class _ObjectSearch:
    """JSON objects starting at the `{` of a text, each place decoded at most once, within
    a reading budget linear in the text's length."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.starts = [match.start() for match in OBJECT_START.finditer(text)]
        self.budget = BASE_BUDGET + BUDGET_PER_CHAR * len(text)
        self.decoder = json.JSONDecoder()

    def first(self) -> dict[str, Any] | None:
        for start in self.starts:
            found = self._decode(start)
            if found is not None:
                return found
        return None

    def last_holding(self, key: str) -> dict[str, Any] | None:
        """The object holding `key` that starts last. Its key is written inside it, as
        `"key"` or with a JSON escape: places after the last of those are not tried."""
        limit = max(self.text.rfind(json.dumps(key)), self.text.rfind("\\"))
        for start in reversed(self.starts):
            if start >= limit:
                continue
            found = self._decode(start)
            if found is not None and key in found:
                return found
        return None

    def _decode(self, start: int) -> dict[str, Any] | None:
        """The object starting at `start`, as `raw_decode(text, start)` would return it."""
        text = self.text
        window = FIRST_WINDOW
        self._spend(ATTEMPT_COST)
        while True:
            end = min(len(text), start + window)
            chunk = text[start:end]
            try:
                value, length = self.decoder.raw_decode(chunk)
            except json.JSONDecodeError as exc:
                cut = end < len(text) and (
                    exc.pos >= len(chunk) - WINDOW_MARGIN or exc.msg.startswith("Unterminated string"))
                if not cut:
                    self._spend(exc.pos)
                    return None
                self._spend(len(chunk))
                window *= 4
                continue
            except RecursionError:  # nested deeper than Python's stack: not an answer
                self._spend(len(chunk))
                return None
            self._spend(length)
            return value if isinstance(value, dict) else None

    def _spend(self, characters: int) -> None:
        self.budget -= characters
        if self.budget < 0:
            raise _OutOfBudget


def _preview(text: str, limit: int = 80) -> str:
    flat = " ".join(text[: limit * 16].split())
    return repr(shorten(flat, limit))


def _id_text(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise AnswerError(f"ordered_ids holds {type(value).__name__} {shorten(repr(value), 80)}, not an id")
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
    raw = answer["ordered_ids"]
    if not isinstance(raw, list):
        raise AnswerError(f"'ordered_ids' is {type(raw).__name__}, not a list")
    try:  # ids as JSON strings, the common case, read without a call each
        ordered = [value.strip() for value in raw]
    except AttributeError:  # a number, or what no id is (_id_text says which)
        ordered = [_id_text(v) for v in raw]
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
