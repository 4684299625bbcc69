"""A provider that does not speak the OpenAI protocol (llm/providers.py), for tests: its
client posts to the `/messages` wire format of tests/fake_openai.py (the key in
`x-api-key`, the system prompt apart, the answer in `content[0].text`).

Registered by tests/test_endpoints.py through an entry point written beside it:
    [pytest_geo.providers]
    msgs = fake_provider:MessagesProvider
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from typing import Any

from pytest_geo.llm.base import ChatClient, ChatRequest, ChatResponse, ModelError
from pytest_geo.settings import Settings


class MessagesClient:
    def __init__(self, base_url: str, api_key: str | None, timeout: float) -> None:
        self.base_url = base_url  # names the server: the answer cache keys on it
        self._key = api_key
        self._timeout = timeout

    async def complete(self, request: ChatRequest) -> ChatResponse:
        system = "\n".join(m["content"] for m in request.messages if m["role"] == "system")
        body = {"model": request.model, "system": system, "max_tokens": request.max_output_tokens or 1024,
                "messages": [dict(m) for m in request.messages if m["role"] != "system"]}
        try:
            answer = await asyncio.to_thread(self._post, body)
        except urllib.error.HTTPError as exc:
            raise ModelError(f"{request.role} model call failed: HTTP {exc.code}", transport=exc.code >= 500) from None
        except OSError as exc:
            raise ModelError(f"{request.role} model call failed: {exc}", fatal="cannot connect") from None
        usage = answer.get("usage", {})
        return ChatResponse(text=answer["content"][0]["text"], prompt_tokens=usage.get("input_tokens", 0),
                            completion_tokens=usage.get("output_tokens", 0))

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        headers = {"content-type": "application/json"}
        if self._key is not None:
            headers["x-api-key"] = self._key
        sent = urllib.request.Request(f"{self.base_url}/messages", data=json.dumps(body).encode("utf-8"),
                                      headers=headers, method="POST")
        with urllib.request.urlopen(sent, timeout=self._timeout) as response:
            answer: dict[str, Any] = json.loads(response.read())
        return answer

    async def aclose(self) -> None:
        pass


class MessagesProvider:
    base_url = "http://127.0.0.1:9/v1"  # nothing listens there: tests point it at a fake with geo_endpoints
    key_variable = "MSGS_API_KEY"

    def client(self, base_url: str, api_key: str | None, settings: Settings) -> ChatClient:
        return MessagesClient(base_url, api_key, settings.timeout)
