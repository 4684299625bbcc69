"""Usage accounting per model role, as the outermost client wrapper.

`calls` counts every request the engine made (re-asks included; not those never sent
because the server was found unusable or the budget was reached), `cache_hits` those the
cache answered, `retries` the HTTP retries the SDK took, `errors` calls that failed for
good; tokens are the ones a server reported, so cache hits add none to them: their
tokens (stored with each cached answer) go to `cached_*_tokens` instead.

Costs are counted as each answer arrives, from the price of the request's model:
`cost_nanousd` for answers a server gave, `saved_nanousd` for what cache hits would have
cost. `unpriced_calls` counts answers whose model has no price; a role with any shows
tokens only (llm/prices.py: never a guessed cost).
`batch_calls` counts calls answered through the Batch API (--geo-batch), whose tokens are
priced at the Batch API's discount.
`cached_input_tokens` counts the prompt tokens the provider's prompt cache served (a
repeated prefix), priced at the model's cached-input price (llm/prices.py), and
`cache_write_tokens` those written to a cache the request asked for, at its cache-write price.
`unreported_usage` counts answers whose server reported no believable usage (missing,
null, not whole numbers, negative, absurd): their tokens are unknown, so the role's cost
is shown as unknown, never as the zero their tokens read as (the budget charges each
what was reserved for it: llm/budget.py).
`cache_rejected` counts cache entries found but rejected (corrupt, or not what the cache
writes: llm/cache.py), each then a miss answered live.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_geo.llm.base import ChatClient, ChatRequest, ChatResponse, ModelError, ServerUnusable
from pytest_geo.llm.prices import PRICES_DATE, dollars, format_dollars
from pytest_geo.price import Price

FIELDS = ("calls", "cache_hits", "retries", "errors", "prompt_tokens", "completion_tokens",
          "cached_prompt_tokens", "cached_completion_tokens", "cost_nanousd", "saved_nanousd", "unpriced_calls",
          "batch_calls", "cache_rejected", "unreported_usage", "cached_input_tokens", "cache_write_tokens")
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


def summed(table: Mapping[str, Mapping[str, int]]) -> dict[str, int]:
    """The counts of every role in `table` added up (an endpoint's usage over its roles)."""
    total = empty_counts()
    for counts in table.values():
        merge_usage({"all": total}, {"all": counts})
    return total


def endpoints_named(endpoint_usage: Mapping[str, object]) -> bool:
    """A model named an endpoint, so usage is shown per endpoint too (else it all went
    to the default server, and the usage per role says everything)."""
    return any(name != "default" for name in endpoint_usage)


def is_priced(counts: Mapping[str, int]) -> bool:
    """Every answer of the role had a price and reported its usage (a role with no
    answers costs nothing)."""
    return counts.get("unpriced_calls", 0) == 0 and counts.get("unreported_usage", 0) == 0


def usage_lines(usage: Mapping[str, Mapping[str, int]]) -> list[str]:
    lines = []
    for role, c in sorted(usage.items()):
        line = (f"{role}: calls={c['calls']} cache_hits={c['cache_hits']} retries={c['retries']} "
                f"errors={c['errors']} prompt_tokens={c['prompt_tokens']} completion_tokens={c['completion_tokens']}")
        if c.get("batch_calls"):
            line += f" batch_calls={c['batch_calls']}"
        if c.get("cache_rejected"):
            line += f" cache_rejected={c['cache_rejected']}"
        if c.get("cached_input_tokens"):
            line += f" cached_input_tokens={c['cached_input_tokens']}"
        if c.get("cache_write_tokens"):
            line += f" cache_write_tokens={c['cache_write_tokens']}"
        if c.get("unreported_usage"):
            line += f" unreported_usage={c['unreported_usage']}"
        if is_priced(c):
            line += f" cost={format_dollars(c.get('cost_nanousd', 0))}"
            if c["cache_hits"]:
                line += f" saved_by_cache={format_dollars(c.get('saved_nanousd', 0))}"
        lines.append(line)
    return lines


def total_cost(usage: Mapping[str, Mapping[str, int]]) -> tuple[int, int] | None:
    """(cost, saved by the cache) in nano-dollars over every role; None when a role's
    model has no price, since a partial sum would read as the run's cost."""
    if not all(is_priced(c) for c in usage.values()):
        return None
    return (sum(c.get("cost_nanousd", 0) for c in usage.values()),
            sum(c.get("saved_nanousd", 0) for c in usage.values()))


def cost_json(usage: Mapping[str, Mapping[str, int]]) -> dict[str, Any]:
    """The JSON report's `cost`: dollars per role and in total, null where unknown."""
    total = total_cost(usage)
    return {
        "currency": "USD",
        "prices_date": PRICES_DATE,
        "total": dollars(total[0]) if total else None,
        "saved_by_cache": dollars(total[1]) if total else None,
        "roles": {
            role: {"cost": dollars(c.get("cost_nanousd", 0)) if is_priced(c) else None,
                   "saved_by_cache": dollars(c.get("saved_nanousd", 0)) if is_priced(c) else None}
            for role, c in sorted(usage.items())
        },
        "unpriced_roles": unpriced_roles(usage),
        "unreported_usage_roles": unreported_roles(usage),
    }


def cost_line(usage: Mapping[str, Mapping[str, int]], price_option: str = "the ini option geo_prices") -> str:
    """The summary's total: what the run cost and what the cache saved, or which roles
    have no price."""
    total = total_cost(usage)
    if total is None:
        unreported = unreported_roles(usage)
        if unreported and not unpriced_roles(usage):
            calls = sum(usage[role].get("unreported_usage", 0) for role in unreported)
            return (f"cost: unknown, the server reported no usable token counts for {calls:,} "
                    f"{'call' if calls == 1 else 'calls'} of {', '.join(unreported)}; tokens above")
        return (f"cost: unknown, no price for the model of {', '.join(unpriced_roles(usage))} "
                f"(the built-in prices are OpenAI's, for its own API only; add it to {price_option}); "
                "tokens above")
    line = f"cost: {format_dollars(total[0])} at list prices ({PRICES_DATE} table and geo_prices)"
    if any(c.get("cache_hits", 0) for c in usage.values()):
        line += f"; cache hits saved {format_dollars(total[1])}"
    return line


def unpriced_roles(usage: Mapping[str, Mapping[str, int]]) -> list[str]:
    return sorted(role for role, c in usage.items() if c.get("unpriced_calls", 0))


def unreported_roles(usage: Mapping[str, Mapping[str, int]]) -> list[str]:
    return sorted(role for role, c in usage.items() if c.get("unreported_usage", 0))


class UsageClient:
    """Counts what passes through; every call runs on the runner's one event loop, so
    plain integer updates need no lock. `prices` is the run's price table (empty for the
    mock, whose answers cost nothing)."""

    def __init__(self, inner: ChatClient, prices: Mapping[str, Price] | None = None) -> None:
        self.inner = inner
        self.prices = dict(prices or {})
        self.usage: UsageTable = {}

    async def complete(self, request: ChatRequest) -> ChatResponse:
        counts = self.usage.get(request.role)
        if counts is None:  # a role's first call (not a new table on every call)
            counts = self.usage[request.role] = empty_counts()
        counts["calls"] += 1
        try:
            response = await self.inner.complete(request)
        except ServerUnusable as exc:
            if not exc.sent:  # never sent (the server stopped, the budget was reached): no call
                counts["calls"] -= 1
                raise
            counts["errors"] += 1
            raise
        except ModelError as exc:
            counts["errors"] += 1
            counts["retries"] += exc.retries
            raise
        except Exception:  # any other failure of the call (a client that raised) is an error too
            counts["errors"] += 1
            raise
        price = self.prices.get(request.model)
        cost = price.nanodollars(response.prompt_tokens, response.completion_tokens, response.batch,
                                 response.cached_input_tokens, response.cache_write_tokens) if price else 0
        if price is None:
            counts["unpriced_calls"] += 1
        if response.cached:
            counts["cache_hits"] += 1
            counts["cached_prompt_tokens"] += response.prompt_tokens
            counts["cached_completion_tokens"] += response.completion_tokens
            counts["saved_nanousd"] += cost
        else:
            counts["retries"] += response.retries
            counts["batch_calls"] += response.batch
            counts["cache_rejected"] += response.cache_rejected
            counts["unreported_usage"] += not response.usage_reported
            counts["cached_input_tokens"] += response.cached_input_tokens
            counts["cache_write_tokens"] += response.cache_write_tokens
            counts["prompt_tokens"] += response.prompt_tokens
            counts["completion_tokens"] += response.completion_tokens
            counts["cost_nanousd"] += cost
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()
