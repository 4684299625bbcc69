"""What each model family accepts in a chat-completions request, and the JSON body sent.

OpenAI documents two contracts for chat completions. Reasoning models (the o-series,
`gpt-5`, `gpt-5-mini`, `gpt-5-nano`, and the gpt-5.x line when reasoning is on) take only
their default temperature (any other value is refused: HTTP 400 `unsupported_value`),
refuse `max_tokens` (`unsupported_parameter`: "Use 'max_completion_tokens' instead") and
take `reasoning_effort`. Other models (gpt-4o, gpt-4.1, and what local servers such as
llama.cpp, vLLM and Ollama serve) get today's parameters: `temperature` (0 unless the
user set one, so reruns agree) and `max_tokens`.

A table cannot know next month's models, so it is only the first guess: a 400 naming a
parameter we sent becomes a `Lesson` (`lesson_for`), which llm/healing.py applies to
every later request of that model (`apply_lessons`)."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_geo.llm.base import ChatRequest

CHAT_TEMPERATURE = 0.0  # what chat models get when the user set none: repeatable answers
TOKEN_PARAMS = ("max_tokens", "max_completion_tokens")
FIXABLE_CODES = frozenset({"unsupported_value", "unsupported_parameter"})

# Names as OpenAI serves them, after any provider prefix ("openai/gpt-5-mini"); a dated
# snapshot ("o3-2025-04-16", "gpt-5-mini-2025-08-07") belongs to its family.
_DATE = r"(?:-\d{4}-\d{2}-\d{2})?"
REASONING = re.compile(rf"(?:o1|o3|o4)(?:-mini|-pro|-preview|-deep-research)?{_DATE}"
                       rf"|gpt-5(?:-mini|-nano|-pro|-codex)?{_DATE}")
GPT5_X = re.compile(r"gpt-5\.\d+(?:-[a-z0-9-]+)?")  # gpt-5.1, gpt-5.2-mini: reasoning on unless effort is "none"
CHAT = re.compile(r"gpt-(?:3\.5|4|5-chat)[a-z0-9.-]*|chatgpt-[a-z0-9.-]*")


@functools.lru_cache(maxsize=256)  # asked for every request; a run has a few models
def family(model: str, reasoning_effort: str | None = None) -> str:
    """"reasoning", "chat" (OpenAI's other chat models) or "unknown" (any other name:
    today's parameters, and reasoning_effort when the user asks for it)."""
    name = model.rsplit("/", 1)[-1].lower()
    if REASONING.fullmatch(name):
        return "reasoning"
    if GPT5_X.fullmatch(name):
        return "reasoning" if reasoning_effort not in (None, "none") else "gpt-5.x"
    if CHAT.fullmatch(name):
        return "chat"
    return "unknown"


# Output caps sized to the answer, for models that spend no output tokens reasoning: no
# text has more tokens than UTF-8 bytes under a byte-level tokenizer (llm/budget.py), so
# a cap of the answer's bytes plus room for its JSON holds any answer that fits the
# schema, and --geo-budget reserves that instead of the default cap.
ANSWER_ROOM = 256  # the JSON object around the content, whitespace, a short preamble
PER_ID = 8  # quotes, comma, newline and indent around each id of a ranking


def ranking_bytes(ids: Sequence[str]) -> int:
    """Most content bytes of a ranking of `ids` (each id once)."""
    return sum(len(i.encode("utf-8")) + PER_ID for i in ids)


def rewrite_bytes(description: str) -> int:
    """Most content bytes of a rewrite: twice the description (a rewrite may add to it)."""
    return 2 * len(description.encode("utf-8"))


def sized_cap(model: str, reasoning_effort: str | None, content_bytes: int, ceiling: int) -> int:
    """The output cap of an answer of at most `content_bytes` bytes of content: sized to it
    for OpenAI's chat models (and gpt-5.x without reasoning), at most `ceiling`; `ceiling`
    for reasoning models, whose hidden reasoning counts against the cap, and for names the
    table does not know (a local server's model may think aloud in its answer)."""
    if family(model, reasoning_effort) not in ("chat", "gpt-5.x"):
        return ceiling
    return min(ceiling, ANSWER_ROOM + content_bytes)


# A prompt shorter than this is not cached (Anthropic's minimum for Sonnet and Opus); at
# about 4 characters a token, a system prompt is marked from 4,096 characters on.
CACHE_MARK_MIN_CHARS = 1024 * 4


def with_cache_mark(body: dict[str, Any]) -> dict[str, Any]:
    """`body` with its system prompt marked for the provider's prompt cache
    (`cache_control`, ephemeral: 5 minutes from its last use), when it is long enough to
    be cached: a judge's system prompt of thousands of tokens, sent with every row, is
    then read at a tenth of the input price instead of paid in full each time."""
    messages = body["messages"]
    first = messages[0] if messages else {}
    text = first.get("content")
    if first.get("role") != "system" or not isinstance(text, str) or len(text) < CACHE_MARK_MIN_CHARS:
        return body
    marked = {**first, "content": [{"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}]}
    return {**body, "messages": [marked, *messages[1:]]}


def request_body(request: ChatRequest, structured: bool = True) -> dict[str, Any]:
    """The JSON body the model's family accepts for `request`; `structured` False never
    sends a response format (--geo-structured off)."""
    kind = family(request.model, request.reasoning_effort)
    body: dict[str, Any] = {"model": request.model, "messages": [dict(m) for m in request.messages]}
    temperature = request.temperature
    if temperature is None and kind != "reasoning":
        temperature = CHAT_TEMPERATURE
    if temperature is not None:
        body["temperature"] = temperature
    if request.max_output_tokens is not None:
        token_param = "max_tokens" if kind in ("chat", "unknown") else "max_completion_tokens"
        body[token_param] = request.max_output_tokens
    if request.reasoning_effort is not None and kind != "chat":
        body["reasoning_effort"] = request.reasoning_effort
    if structured and request.response_schema is not None:
        body["response_format"] = response_format(request.response_schema)
    return body


_NOT_IN_NAME = re.compile(r"[^A-Za-z0-9_-]")


def response_format(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A strict `json_schema` response format named by the schema's title."""
    name = _NOT_IN_NAME.sub("_", str(schema.get("title") or "answer"))[:64]
    return {"type": "json_schema", "json_schema": {"name": name, "schema": dict(schema), "strict": True}}


@dataclass(frozen=True)
class ShapedRequest(ChatRequest):
    """A request with the body that is sent for it: what the cache keys on, what the
    backend posts and what a Batch API line holds."""

    body: Mapping[str, Any] = field(default_factory=dict)

    @functools.cached_property
    def body_json(self) -> bytes:
        """The body's bytes (`encode_body`), encoded once for the cache's key and the post."""
        return encode_body(self.body)


def sent_body(request: ChatRequest) -> dict[str, Any]:
    """The body a request is sent with: its shaped body, else the table's (a client used
    without the healing layer above it)."""
    if isinstance(request, ShapedRequest):
        return dict(request.body)
    return request_body(request)


def encode_body(body: Mapping[str, Any]) -> bytes:
    """`body` as the bytes posted: compact UTF-8 JSON as the SDK writes it (no NaN or
    infinity, which JSON has not), with its keys sorted, so that the answer cache's key is a
    hash of these very bytes (llm/cache.py) and a request is encoded once, not twice."""
    return json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")


def sent_json(request: ChatRequest) -> bytes:
    """The bytes a request is posted as (`encode_body` of `sent_body`)."""
    if isinstance(request, ShapedRequest):
        return request.body_json
    return encode_body(request_body(request))


@dataclass(frozen=True)
class Refusal:
    """An HTTP 400's error object: `{"error": {"message", "type", "param", "code"}}`."""

    message: str
    param: str | None = None
    code: str | None = None

    @classmethod
    def from_body(cls, body: object) -> Refusal:
        """From the SDK's error body (the inner `error` object, or the whole body)."""
        error = body.get("error", body) if isinstance(body, Mapping) else body
        if not isinstance(error, Mapping):
            return cls(str(error or ""))
        param, code = error.get("param"), error.get("code")
        return cls(str(error.get("message") or ""), param if isinstance(param, str) else None,
                   code if isinstance(code, str) else None)


@dataclass(frozen=True)
class Lesson:
    """A parameter a server refused for a model: sent without it from now on, or under
    the name the server asked for (`replacement`). `refused` is the value sent (for
    `unsupported_value`), or None when the parameter itself was refused."""

    model: str
    param: str
    replacement: str | None = None
    refused: str | None = None

    def text(self) -> str:
        """One line for the summary, the header and the report."""
        if self.replacement is not None:
            return f"{self.model}: sent {self.replacement} instead of {self.param} (the server refused {self.param})"
        why = f"the server refused {self.refused}" if self.refused is not None else "the server refused it"
        return f"{self.model}: sent without {self.param} ({why})"

    def as_json(self) -> dict[str, Any]:
        return {"model": self.model, "param": self.param, "replacement": self.replacement,
                "refused": self.refused, "text": self.text()}

    @classmethod
    def from_json(cls, data: object) -> Lesson | None:
        if not isinstance(data, Mapping):
            return None
        model, param = data.get("model"), data.get("param")
        replacement, refused = data.get("replacement"), data.get("refused")
        if not isinstance(model, str) or not isinstance(param, str):
            return None
        return cls(model, param, replacement if isinstance(replacement, str) else None,
                   refused if isinstance(refused, str) else None)


# 400s about one row's content, not the request's shape: never a reason to stop the run.
ROW_CODES = frozenset({"context_length_exceeded", "string_above_max_length", "content_policy_violation",
                       "invalid_prompt"})
QUOTED = re.compile(r"'([A-Za-z_][A-Za-z0-9_.\[\]]*)'")
USE_INSTEAD = re.compile(r"[Uu]se '([A-Za-z_]+)' instead")
UNTOUCHABLE = frozenset({"model", "messages"})  # a request without them is no request


def lesson_for(refusal: Refusal, body: Mapping[str, Any]) -> Lesson | None:
    """The change a 400 asks for, when it names a parameter we sent (its `param`, else a
    quoted name in its message) with one of OpenAI's codes for a refused parameter, or no
    code at all (servers other than OpenAI's); None when no change of ours can fix it."""
    if refusal.code is not None and refusal.code not in FIXABLE_CODES:
        return None
    names = [refusal.param] if refusal.param else []
    names += QUOTED.findall(refusal.message)
    sent = next((top for name in names if (top := _top_level(name)) in body and top not in UNTOUCHABLE), None)
    if sent is None:
        return None
    replacement = None
    hint = USE_INSTEAD.search(refusal.message)
    if hint is not None and hint.group(1) not in body and hint.group(1) not in UNTOUCHABLE:
        replacement = hint.group(1)
    refused = None
    if refusal.code == "unsupported_value" and replacement is None:
        value = body[sent]
        refused = f"{value:g}" if isinstance(value, float) else str(value)
    return Lesson(str(body.get("model", "")), sent, replacement, refused)


def _top_level(name: str) -> str:
    """`response_format.json_schema.schema` -> `response_format`."""
    return re.split(r"[.\[]", name, maxsplit=1)[0]


def merge_lessons(total: list[dict[str, Any]], other: object) -> list[dict[str, Any]]:
    """Add the lessons in `other` (plain data from another process) to `total`, once per
    model and parameter, in the order first seen; returns `total`."""
    seen = {(entry["model"], entry["param"]) for entry in total}
    for data in other if isinstance(other, list) else []:
        lesson = Lesson.from_json(data)
        if lesson is not None and (lesson.model, lesson.param) not in seen:
            seen.add((lesson.model, lesson.param))
            total.append(lesson.as_json())
    return total


def apply_lessons(body: dict[str, Any], lessons: Mapping[str, Lesson]) -> dict[str, Any]:
    """`body` as the lessons learned for its model say (param -> lesson); changed in place."""
    for param, lesson in lessons.items():
        if param not in body:
            continue
        value = body.pop(param)
        if lesson.replacement is not None and lesson.replacement not in lessons:
            body[lesson.replacement] = value
    return body
