"""The one interface every model backend speaks: a chat request in, text and usage out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeGuard

Message = Mapping[str, str]


@dataclass(frozen=True)
class ChatRequest:
    """One chat-completions call.

    ``context`` holds the structured values the prompt was rendered from (query,
    candidates, description, ...). Real backends ignore it and it is never part of a
    cache key; the offline mock answers from it instead of parsing the prompt text.

    The generation settings below say what the caller wants, not what is sent: the
    request profile of the model (llm/profiles.py) maps them onto the parameters that
    model accepts (``temperature`` None: none set, so the profile's choice: 0 for chat
    models, for repeatable answers, and nothing for reasoning models, which take only
    their own default; ``max_output_tokens`` as
    ``max_tokens`` or ``max_completion_tokens``; ``response_schema``, a JSON Schema named
    by its ``title``, as a strict ``json_schema`` response format).
    """

    role: str
    model: str
    messages: Sequence[Message]
    temperature: float | None = None
    context: Mapping[str, Any] = field(default_factory=dict)
    max_output_tokens: int | None = None
    response_schema: Mapping[str, Any] | None = None
    reasoning_effort: str | None = None


# An answer longer than this (in characters) is never parsed, cached or reported whole:
# answers are kilobytes, and an answer is parsed on the loop every row shares.
MAX_ANSWER_CHARS = 1 << 20
# Tokens of one call, prompt or completion: no context window comes near it; a count at or
# over it (a server's, a cache entry's) is not believed.
MAX_TOKENS = 10**9


def is_token_count(value: object) -> TypeGuard[int]:
    """A believable token count: an int (not a bool) in [0, MAX_TOKENS)."""
    return type(value) is int and 0 <= value < MAX_TOKENS


@dataclass(frozen=True)
class ChatResponse:
    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached: bool = False
    retries: int = 0
    batch: bool = False  # answered through the Batch API (billed at batch prices)
    finish_reason: str | None = None  # "length": the output-token cap cut the answer
    cache_rejected: bool = False  # a live answer that replaced a rejected cache entry (llm/cache.py)
    # False: the server's usage was missing or not believable (the tokens above read 0): the
    # call is charged its reservation (llm/budget.py) and its cost is unknown (llm/usage.py).
    usage_reported: bool = True
    cached_input_tokens: int = 0  # of prompt_tokens, those the provider's prompt cache served (priced lower)
    cache_write_tokens: int = 0  # of prompt_tokens, those written to a cache the request asked for


class ModelError(Exception):
    """A model call failed for good (after the backend's own retries, counted in `retries`).

    `fatal` names a failure no retry or later row can fix (the server cannot be reached
    or found, the key is refused, the model does not exist); `transport` marks a failure
    of the server rather than of its answer (connection, timeout, 429, 5xx)."""

    def __init__(self, message: str, retries: int = 0, fatal: str | None = None, transport: bool = False) -> None:
        super().__init__(message)
        self.retries = retries
        self.fatal = fatal
        self.transport = transport or fatal is not None


class RequestRefused(ModelError):
    """The server refused the request as sent (HTTP 400): `refusal` holds its error object
    (message, param, code), which llm/profiles.py reads for a change that fixes it."""

    def __init__(self, message: str, refusal: Any, retries: int = 0) -> None:
        super().__init__(message, retries=retries)
        self.refusal = refusal


class ServerUnusable(ModelError):
    """The run's model server was found unusable (llm/breaker.py), and the row counts as
    not run rather than as an error. `sent`: this call itself reached the server (the one
    whose failure showed it unusable); otherwise it was never sent, and the usage counts
    (llm/usage.py) count it neither as a call nor as an error."""

    def __init__(self, message: str, sent: bool = False) -> None:
        super().__init__(message)
        self.sent = sent


class ChatClient(Protocol):
    """An async chat backend.

    Example::

        class Echo:
            async def complete(self, request: ChatRequest) -> ChatResponse:
                return ChatResponse(text=request.messages[-1]["content"])

            async def aclose(self) -> None:
                pass
    """

    async def complete(self, request: ChatRequest) -> ChatResponse: ...

    async def aclose(self) -> None: ...
