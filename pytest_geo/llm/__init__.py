"""Model backends and the client stack over them: the client protocol, request profiles
and their healing, the offline mock, the OpenAI SDK client, batching, the cache, the
breaker, the request bound and its concurrency controller, usage, and the one function
that assembles them (stack.py)."""

from __future__ import annotations

from pytest_geo.llm.base import (
    ChatClient,
    ChatRequest,
    ChatResponse,
    Message,
    ModelError,
)

__all__ = ["ChatClient", "ChatRequest", "ChatResponse", "Message", "ModelError"]
