"""Usage counted per role (llm/usage.py)."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.unit


def test_a_call_failing_with_any_exception_counts_as_an_error() -> None:
    import asyncio

    from pytest_geo.llm.base import ChatRequest
    from pytest_geo.llm.usage import UsageClient

    class Broken:
        async def complete(self, request: ChatRequest) -> Any:
            raise RuntimeError("the SDK failed in its own way")

        async def aclose(self) -> None:
            pass

    usage = UsageClient(Broken())
    request = ChatRequest(role="ranker", model="m", messages=({"role": "user", "content": "x"},))
    with pytest.raises(RuntimeError):
        asyncio.run(usage.complete(request))
    assert usage.usage["ranker"]["errors"] == 1
