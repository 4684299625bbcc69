"""A run's plan before any spending (`egeo plan`, `pytest --geo-plan`): the rows go
through the run's own pipeline (judges, cached before-rankings, shared rank_before,
variants, given rewrites) with a client that never sends anything; it answers as the
offline mock does and notes every request. So the plan's calls are the run's calls
(when every answer parses: a re-ask is a call more), its prompt tokens are estimated
from the prompts as rendered, its output tokens are each call's output cap (the worst
case) and its dollars, at list prices, an upper bound. The answer cache is not consulted:
the plan is for a cold cache. A long system prompt sent again by the same role and model
is counted as the provider's prompt cache serves it (at the model's cached-input price,
where the price table or geo_prices gives one), and --geo-batch halves the price only on
endpoints that offer the Batch API."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from pytest_geo.data.dataset import GeoRow
from pytest_geo.engine.session import GeoSession
from pytest_geo.llm.base import ChatRequest, ChatResponse
from pytest_geo.llm.budget import priced_as
from pytest_geo.llm.endpoints import EndpointError, resolve
from pytest_geo.llm.mock import MockClient
from pytest_geo.llm.prices import format_dollars, price_table
from pytest_geo.llm.providers import ProviderError
from pytest_geo.llm.stack import build_stack
from pytest_geo.price import Price
from pytest_geo.settings import DEFAULT_MAX_OUTPUT_TOKENS, Settings

CHARS_PER_TOKEN = 4  # English text in a BPE tokenizer, near enough for a plan
MESSAGE_TOKENS = 4  # the chat format's tokens around each message
SECONDS_PER_CALL = 5.0  # the plan's assumed latency of one call, for its wall time
# Providers cache a prompt's prefix from this length on (OpenAI's documented minimum).
CACHEABLE_PREFIX_TOKENS = 1024


@dataclass
class Line:
    """The plan of one (role, model): its calls and their tokens."""

    calls: int = 0
    prompt_tokens: int = 0
    output_tokens: int = 0  # each call's output cap: the worst case
    cached_tokens: int = 0  # of prompt_tokens, system prompts sent before (the prompt cache's)
    written_tokens: int = 0  # of prompt_tokens, system prompts sent the first time (written to the cache)
    system_prompts: set[str] = field(default_factory=set)


@dataclass
class Plan:
    rows: int  # row runs (a row once per variant)
    # (role, model, judge's name or "") -> its line
    lines: dict[tuple[str, str, str], Line] = field(default_factory=dict)

    @property
    def calls(self) -> int:
        return sum(line.calls for line in self.lines.values())


def message_tokens(text: str) -> int:
    """A message's tokens, estimated: its text's and the chat format's around it."""
    return MESSAGE_TOKENS + math.ceil(len(text) / CHARS_PER_TOKEN)


def estimated_tokens(request: ChatRequest) -> int:
    return sum(message_tokens(m.get("content", "")) for m in request.messages)


class PlanClient:
    """Notes each request and answers it as the mock does; sends nothing."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.mock = MockClient()

    async def complete(self, request: ChatRequest) -> ChatResponse:
        key = (request.role, request.model, str(request.context.get("judge", "")))
        line = self.plan.lines.setdefault(key, Line())
        line.calls += 1
        line.prompt_tokens += estimated_tokens(request)
        cached, written = _cached_prefix(line, request)
        line.cached_tokens += cached
        line.written_tokens += written
        line.output_tokens += request.max_output_tokens or DEFAULT_MAX_OUTPUT_TOKENS
        return await self.mock.complete(request)

    async def aclose(self) -> None:
        return None


def _cached_prefix(line: Line, request: ChatRequest) -> tuple[int, int]:
    """(read, written): the tokens of the request's system prompt, when it is long enough
    for a provider's prompt cache, as read from the cache (this role and model sent it
    before) or written to it (the first time, at the cache-write price where the model
    has one); (0, 0) for a short one."""
    first = request.messages[0] if request.messages else {}
    if first.get("role") != "system":
        return 0, 0
    text = first.get("content", "")
    tokens = message_tokens(text)
    if tokens < CACHEABLE_PREFIX_TOKENS:
        return 0, 0
    if text in line.system_prompts:
        return tokens, 0
    line.system_prompts.add(text)
    return 0, tokens


def plan_run(settings: Settings, rows: Sequence[GeoRow]) -> Plan:
    """The plan of running `rows` with `settings`: the run's pipeline, its client replaced.
    A run that could not start gets no plan: the prompts, the variants' prompts and the
    given rewrites are checked first (PromptError, DatasetError), as the run checks them."""
    plan = Plan(len(rows))
    quiet = replace(settings, mock=True, use_cache=False, budget=None, budget_tokens=None, budget_ledger=None,
                    batch=False, progress="off")
    geo = GeoSession(quiet, build_stack(quiet, PlanClient(plan)))
    try:
        geo.engine  # noqa: B018 (built for its errors)
        geo.variant_prompts  # noqa: B018 (a variant changing the ranker's prompts is an error)
        geo.check_given(rows)
        geo.schedule_many(rows)
        for row in rows:
            geo.outcome(row)
    finally:
        geo.close()
    return plan


def _endpoint(model: str, settings: Settings) -> tuple[str, bool]:
    """(the endpoint's name, whether its calls go in batches)."""
    try:
        endpoint = resolve(model, settings.endpoints)[0]
    except (EndpointError, ProviderError):
        endpoint = None
    if endpoint is None:
        return "default", settings.batch
    return endpoint.name, settings.batch and endpoint.batch


def _price(model: str, settings: Settings) -> Price | None:
    """The price the run's calls to `model` are charged: under the name sent, at the
    prices of the server it is sent to (llm/prices.py: a local server has only geo_prices)."""
    sent, url = priced_as(model, settings)
    return price_table(settings.prices, url).get(sent)


def plan_lines(plan: Plan, settings: Settings) -> list[str]:
    """The plan as the terminal shows it: a line per role and model, then the totals."""
    out = [f"geo plan: {plan.rows} rows, {plan.calls} model calls (no model was called)"]
    total, full, unpriced = 0, 0, []
    for (role, model, judge), line in sorted(plan.lines.items(), key=lambda item: (item[0][2], item[0][:2])):
        endpoint, batched = _endpoint(model, settings)
        price = _price(model, settings)
        cost = price.nanodollars(line.prompt_tokens, line.output_tokens, batched, line.cached_tokens,
                                 line.written_tokens) \
            if price else None
        total += cost or 0
        full += price.nanodollars(line.prompt_tokens, line.output_tokens) if price else 0
        if cost is None:
            unpriced.append(model)
        who = f"judge {judge}" if judge else role
        cached = f" ({line.cached_tokens:,} cached)" if line.cached_tokens else ""
        out.append(f"  {who} {model} (endpoint {endpoint}): {line.calls} calls, ~{line.prompt_tokens:,} prompt "
                   f"tokens{cached}, <= {line.output_tokens:,} output tokens, "
                   f"{format_dollars(cost) if cost is not None else 'no price'}" + (", Batch API" if batched else ""))
    out.append(f"  at most {format_dollars(total)} at list prices")
    if full > total:  # what the same calls cost paying every prompt in full, one by one
        out.append(f"  the same calls without prompt caching or the Batch API: at most {format_dollars(full)} "
                   f"(this plan: {total / full:.0%} of it)")
    if unpriced:
        out.append(f"  not priced (no list price known; the ini option geo_prices adds one): {', '.join(unpriced)}")
    in_flight = _rows_in_flight(settings)
    out.append(f"  wall time about {_wall(plan, settings)} at {in_flight} row{'s' if in_flight != 1 else ''} in "
               f"flight and {SECONDS_PER_CALL:g} s a call")
    return out


def _rows_in_flight(settings: Settings) -> int:
    return settings.concurrency or settings.max_concurrency


def _wall(plan: Plan, settings: Settings) -> str:
    """A row's calls run in two steps (rank_before beside the rewrite, then rank_after)."""
    seconds = math.ceil(plan.rows / _rows_in_flight(settings)) * 2 * SECONDS_PER_CALL
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:g} s"
