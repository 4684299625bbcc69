"""Chat completions through the real `openai` SDK, against any OpenAI-compatible server."""

from __future__ import annotations

from typing import Any

import openai

from pytest_geo.llm.base import ChatRequest, ChatResponse, ModelError


class OpenAIChatClient:
    def __init__(
        self,
        api_key: str,
        base_url: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 4,
    ) -> None:
        self._client = openai.AsyncOpenAI(api_key=api_key, base_url=base_url, timeout=timeout, max_retries=max_retries)

    async def complete(self, request: ChatRequest) -> ChatResponse:
        try:
            completion: Any = await self._client.chat.completions.create(
                model=request.model,
                messages=[dict(m) for m in request.messages],  # type: ignore[misc]
                temperature=request.temperature,
            )
        except openai.APIError as exc:
            raise ModelError(f"{request.role} model call failed: {type(exc).__name__}: {exc}") from None
        text = completion.choices[0].message.content or "" if completion.choices else ""
        usage = completion.usage
        return ChatResponse(
            text=text,
            prompt_tokens=getattr(usage, "prompt_tokens", 0) or 0,
            completion_tokens=getattr(usage, "completion_tokens", 0) or 0,
        )

    async def aclose(self) -> None:
        await self._client.close()
