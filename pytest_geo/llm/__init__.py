"""Model backends and the client stack over them: the client protocol, request profiles
and their healing, the offline mock, the OpenAI SDK client, batching, the cache, the
breaker, the request bound and its concurrency controller, usage, and the one function
that assembles them (stack.py), one stack per endpoint a model's prefix names
(endpoints.py); `Provider` is how a package adds an API with its own wire format
(providers.py)."""

from __future__ import annotations

from pytest_geo.llm.base import (
    ChatClient,
    ChatRequest,
    ChatResponse,
    Message,
    ModelError,
)
from pytest_geo.llm.endpoints import Endpoint
from pytest_geo.llm.providers import Provider

__all__ = ["ChatClient", "ChatRequest", "ChatResponse", "Endpoint", "Message", "ModelError", "Provider"]
