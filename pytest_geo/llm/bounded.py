"""The request bound: at most N model requests in flight, N turned by the concurrency
controller (llm/adaptive.py)."""

from __future__ import annotations

import time
from collections.abc import Callable

from pytest_geo.llm.base import ChatClient, ChatRequest, ChatResponse
from pytest_geo.llm.limiter import Limiter


class BoundedClient:
    """At most `limit` model requests in flight at once, whoever sends them; a Limiter
    given as `limit` can be resized meanwhile (--geo-concurrency auto), and
    `on_success` hears how long every call that came back at its first attempt took
    (a retried call's time is mostly the wait a 429 or an error imposed, not the server's
    pace), and `on_tokens` the tokens a token limit charged every answered call (its
    prompt's and its output cap, as OpenAI meters a request when it comes; its answer's
    without a cap), retried or not."""

    def __init__(self, inner: ChatClient, limit: int | Limiter,
                 on_success: Callable[[float], None] | None = None,
                 on_tokens: Callable[[int], None] | None = None) -> None:
        self.inner = inner
        self._slots = limit if isinstance(limit, Limiter) else Limiter(limit)
        self._on_success = on_success
        self._on_tokens = on_tokens

    async def complete(self, request: ChatRequest) -> ChatResponse:
        async with self._slots:
            started = time.perf_counter()
            response = await self.inner.complete(request)
        if self._on_success is not None and not response.retries:
            self._on_success(time.perf_counter() - started)
        if self._on_tokens is not None and response.usage_reported and response.prompt_tokens:
            self._on_tokens(response.prompt_tokens + (request.max_output_tokens or response.completion_tokens))
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()
