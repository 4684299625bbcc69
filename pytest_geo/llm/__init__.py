"""Model backends: the client protocol, the offline mock, the OpenAI SDK client and the cache."""

from __future__ import annotations

from pytest_geo.llm.base import (
    ChatClient,
    ChatRequest,
    ChatResponse,
    Message,
    ModelError,
)

__all__ = ["ChatClient", "ChatRequest", "ChatResponse", "Message", "ModelError"]
