"""Usage accounting per model role, as the outermost client wrapper.

`calls` counts every request the engine made (re-asks included), `cache_hits` those the
cache answered, `retries` the HTTP retries the SDK took, `errors` calls that failed for
good; tokens are the ones a server reported, so cache hits add none. `batch_calls` counts
calls answered through the Batch API (--geo-batch): their tokens are billed at batch prices.
"""

from __future__ import annotations

from collections.abc import Mapping

from pytest_geo.llm.base import ChatClient, ChatRequest, ChatResponse, ModelError

FIELDS = ("calls", "cache_hits", "retries", "errors", "prompt_tokens", "completion_tokens", "batch_calls")
UsageTable = dict[str, dict[str, int]]  # role -> field -> count; plain data, crosses processes


def empty_counts() -> dict[str, int]:
    return {name: 0 for name in FIELDS}


def merge_usage(total: UsageTable, other: Mapping[str, Mapping[str, int]]) -> UsageTable:
    """Add `other` into `total` (in place) and return it; unknown fields are ignored."""
    for role, counts in other.items():
        mine = total.setdefault(role, empty_counts())
        for name in FIELDS:
            value = counts.get(name, 0)
            mine[name] += value if isinstance(value, int) else 0
    return total


def usage_lines(usage: Mapping[str, Mapping[str, int]]) -> list[str]:
    return [
        f"{role}: calls={c['calls']} cache_hits={c['cache_hits']} retries={c['retries']} errors={c['errors']} "
        f"prompt_tokens={c['prompt_tokens']} completion_tokens={c['completion_tokens']}"
        + (f" batch_calls={c['batch_calls']}" if c.get("batch_calls") else "")
        for role, c in sorted(usage.items())
    ]


class UsageClient:
    """Counts what passes through; every call runs on the runner's one event loop, so
    plain integer updates need no lock."""

    def __init__(self, inner: ChatClient) -> None:
        self.inner = inner
        self.usage: UsageTable = {}

    async def complete(self, request: ChatRequest) -> ChatResponse:
        counts = self.usage.setdefault(request.role, empty_counts())
        counts["calls"] += 1
        try:
            response = await self.inner.complete(request)
        except ModelError as exc:
            counts["errors"] += 1
            counts["retries"] += exc.retries
            raise
        if response.cached:
            counts["cache_hits"] += 1
        else:
            counts["retries"] += response.retries
            counts["batch_calls"] += response.batch
            counts["prompt_tokens"] += response.prompt_tokens
            counts["completion_tokens"] += response.completion_tokens
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()
