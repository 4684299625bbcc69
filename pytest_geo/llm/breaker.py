"""Stop calling a model server that cannot serve the run.

Fail fast: until one call has succeeded, a fatal failure (connection refused, unknown
host, a refused key, an unknown model) means every call will fail the same way. Circuit
breaker: after a run of consecutive failed calls (each already retried), the server is
down. Either way the breaker trips: calls are no longer sent, they raise ServerUnusable
at once, and the rows they belong to count as not run. A request the server refuses as
sent (HTTP 400) and no change of parameters fixes (llm/healing.py says which) trips it
too when it comes before any call succeeded: every call is built the same way."""

from __future__ import annotations

from urllib.parse import urlsplit

from pytest_geo.llm.base import ChatClient, ChatRequest, ChatResponse, ModelError, ServerUnusable


class Breaker:
    def __init__(self, inner: ChatClient, base_url: str | None, consecutive: int, name: str | None = None) -> None:
        """`name`: how messages name the server (an endpoint's name and host), else its host."""
        self.inner = inner
        self.host = name or (urlsplit(base_url).hostname if base_url else None) or "the model server"
        self.consecutive = consecutive
        self.failures = 0
        self.succeeded = False
        self.tripped: str | None = None  # why calls are no longer sent: one message for the run

    async def complete(self, request: ChatRequest) -> ChatResponse:
        if self.tripped is not None:
            raise ServerUnusable(self.tripped)
        try:
            response = await self.inner.complete(request)
        except ModelError as exc:
            if exc.fatal is not None and not self.succeeded:
                self.tripped = self.tripped or (
                    f"cannot use {self.host} for model {request.model}: {exc.fatal} ({exc})")
                raise ServerUnusable(self.tripped, sent=True) from None
            if exc.transport:
                self.failures += 1
                if self.failures >= self.consecutive and self.tripped is None:
                    self.tripped = (f"stopped calling {self.host} (model {request.model}) after {self.failures} "
                                    f"consecutive failed calls; last: {exc}")
            raise
        self.succeeded = True
        self.failures = 0
        return response

    def refused(self, request: ChatRequest, exc: ModelError, why: str, always: bool = False) -> None:
        """A call the server refused and no change fixes (llm/healing.py): before any
        call succeeded, or `always` (a refusal the user said must fail the run), the run
        stops; the call then raises ServerUnusable. After a success it is its row's error."""
        if self.tripped is not None:
            raise ServerUnusable(self.tripped, sent=True) from None
        if self.succeeded and not always:
            return
        self.tripped = f"cannot use {self.host} for model {request.model}: {why} ({exc})"
        raise ServerUnusable(self.tripped, sent=True) from None

    async def aclose(self) -> None:
        await self.inner.aclose()
