"""A spending limit that is never crossed (`--geo-budget DOLLARS`, `--geo-budget-tokens N`).

Before a call is sent it reserves its worst case: an upper bound of its prompt's tokens
(`prompt_token_bound`) plus its output-token cap, priced at its model's list price (the
Batch API's discount included). When the answer comes the reservation is replaced by what
the server reported (an answer without believable usage keeps its worst case, charged as
unknown). A call whose worst case would cross the limit waits while other calls
hold reservations (their answers usually cost less, and free the difference); once it
could not fit even if every reservation were released, the budget is reached: that call
and every later one raise BudgetReached (a ServerUnusable, so its row counts as not run).

What was spent and reserved is kept in a ledger (llm/ledger.py) that the run's processes,
pytest-xdist workers included, share exactly.

Calls the cache answers never reach this layer: it sits below the cache.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from pytest_geo.llm.base import ChatClient, ChatRequest, ChatResponse, ModelError, ServerUnusable
from pytest_geo.llm.file_lock import locks_available
from pytest_geo.llm.ledger import WAIT, BudgetLimits, BudgetStatus, Cost, Ledger
from pytest_geo.llm.prices import BUILTIN_PRICES, format_dollars, price_table
from pytest_geo.llm.profiles import TOKEN_PARAMS, ShapedRequest, request_body, sent_body
from pytest_geo.price import Price
from pytest_geo.settings import OUTPUT_CAP_FLAGS, Settings, server_url

# The output cap reserved for a request sent without one (ChatRequest.max_output_tokens
# None), which the layer then adds to it, so the cap it reserved is the cap sent.
DEFAULT_OUTPUT_CAP = 4096
# Chat formatting around the message texts, in tokens: OpenAI's count is 3 a message (start,
# role, end) plus 1 for a name and 3 priming the answer; chat templates of open models wrap
# a message in a few special tokens. These bounds leave room for either.
MESSAGE_OVERHEAD = 8
REQUEST_OVERHEAD = 8
# A JSON Schema response format is shown to the model with the prompt; OpenAI does not
# document its wrapping, so its UTF-8 bytes are counted with this much around them.
SCHEMA_OVERHEAD = 64
WAIT_FIRST, WAIT_MOST = 0.01, 0.2  # seconds between looks at the ledger while waiting


def prompt_token_bound(request: ChatRequest) -> int:
    """At least as many tokens as the request's prompt can be billed for, without a tokenizer.

    OpenAI's tokenizers (GPT-2's, cl100k_base, o200k_base) are byte-level BPE: the text is
    encoded as UTF-8, every byte starts as one token, and each merge joins two adjacent
    tokens into one, so no text has more tokens than bytes. SentencePiece tokenizers with
    byte fallback (Llama, Mistral) are bounded the same way: a piece covers at least one
    character, or is one byte. Read from the body as sent (llm/profiles.py): each message's
    role and text are counted in bytes, plus MESSAGE_OVERHEAD for the chat format around
    it, plus REQUEST_OVERHEAD for the answer's priming, and the response format's JSON
    bytes plus SCHEMA_OVERHEAD when one is sent. The bound is loose for English (about 4
    bytes a token) and tight for text that tokenizes badly, which is the case it must hold for."""
    body = sent_body(request)
    total = REQUEST_OVERHEAD
    for message in body.get("messages", ()):
        total += MESSAGE_OVERHEAD + sum(len(str(value).encode("utf-8")) for value in message.values())
    if body.get("response_format") is not None:
        total += SCHEMA_OVERHEAD + len(json.dumps(body["response_format"], ensure_ascii=False).encode("utf-8"))
    return total


def output_cap(request: ChatRequest) -> int | None:
    """The output-token cap the request is sent with, under whichever name its model takes."""
    body = sent_body(request)
    caps = [body[param] for param in TOKEN_PARAMS if isinstance(body.get(param), int)]
    return min(caps) if caps else None


def reserved_cap(request: ChatRequest) -> int:
    """The output tokens reserved for `request`: the cap it is sent with; else, when the
    server refused the cap's parameter and healing took it off (llm/healing.py), the cap
    the caller asked for, which the answer's usage is then checked against."""
    return output_cap(request) or request.max_output_tokens or DEFAULT_OUTPUT_CAP


def with_output_cap(request: ChatRequest, cap: int) -> ChatRequest:
    """`request` sent with `cap` output tokens, under the name its model's family takes. Set
    here, below the cache, so the cache keys on the body as the caller shaped it."""
    if not isinstance(request, ShapedRequest):
        return replace(request, max_output_tokens=cap)  # sent with the table's body, made from it
    param = next(p for p in TOKEN_PARAMS if p in request_body(replace(request, max_output_tokens=cap)))
    return replace(request, max_output_tokens=cap, body={**request.body, param: cap})


class BudgetReached(ServerUnusable):
    """The call was not sent: its worst case does not fit in what is left of the budget."""


class BudgetClient:
    """Reserves each call's worst case in the ledger before it goes to `inner`."""

    def __init__(self, inner: ChatClient, ledger: Ledger, prices: Mapping[str, Price],
                 batch_roles: frozenset[str] = frozenset(), cap_flag: str = "--geo-max-output-tokens") -> None:
        self.inner = inner
        self.cap_flag = cap_flag  # named when the output cap is what does not fit
        self.ledger = ledger
        self.prices = dict(prices)
        self.batch_roles = batch_roles  # roles whose calls go through the Batch API (half price)
        # This process's calls waiting for budget, in the order they began to wait; each
        # settlement wakes the newest at once (other processes' settlements are seen at the
        # next look). Newest first: a row's last call (rank_after) starts waiting after its
        # first ones, so rows already under way finish before calls of rows barely started,
        # and a budget that runs out leaves rows not run rather than half run.
        self._waiting: list[Any] = []  # asyncio.Event each, made on the loop that waits

    def worst_case(self, request: ChatRequest, with_cap: bool = True) -> Cost:
        prompt = prompt_token_bound(request)
        cap = reserved_cap(request) if with_cap else 0
        price = self.prices.get(request.model)
        # every prompt token at the higher of the input and cache-write prices: an upper bound
        nanousd = price.nanodollars(prompt, cap, request.role in self.batch_roles, written_tokens=prompt) \
            if price is not None else 0
        return Cost(nanousd, prompt + cap)

    def actual(self, request: ChatRequest, response: ChatResponse) -> Cost:
        price = self.prices.get(request.model)
        tokens = response.prompt_tokens + response.completion_tokens
        nanousd = price.nanodollars(response.prompt_tokens, response.completion_tokens, response.batch,
                                    response.cached_input_tokens, response.cache_write_tokens) if price else 0
        return Cost(nanousd, tokens)

    async def complete(self, request: ChatRequest) -> ChatResponse:
        if request.max_output_tokens is None:  # no cap asked for (a caller of the engine): the layer's
            request = with_output_cap(request, DEFAULT_OUTPUT_CAP)
        limits = self.ledger.limits
        if limits.nanousd is not None and limits.tokens is None and request.model not in self.prices:
            # check_budget refuses this at start for the run's models; any other stops the budget.
            raise BudgetReached(self.ledger.stop(f"budget stopped: no price for model {request.model}"))
        worst = self.worst_case(request)
        await self._reserve(request, worst)
        try:
            response = await self.inner.complete(request)
        except ModelError as exc:
            # A timeout or a dropped connection may have been answered and billed; a refusal
            # (4xx) or a server never reached was not.
            self._settle(worst, None if exc.transport and exc.fatal is None else Cost())
            raise
        except BaseException:  # cancelled in flight, or a client that raised: maybe billed
            self._settle(worst, None)
            raise
        if not response.usage_reported:  # what it cost is unknown: charged its worst case
            self._settle(worst, None)
            return response
        actual = self.actual(request, response)
        self._settle(worst, actual, lambda: (
            f"budget stopped: a {request.role} call to {request.model} was billed {describe(actual)}, more than "
            f"its reserved worst case {describe(worst)} (did the server ignore the output-token cap?)"))
        return response

    def _settle(self, worst: Cost, actual: Cost | None, overrun: Callable[[], str] | None = None) -> None:
        self.ledger.settle(worst, actual, overrun)
        if self._waiting:
            self._waiting[-1].set()

    async def _reserve(self, request: ChatRequest, worst: Cost) -> None:
        import asyncio  # here: the plugin reads budgets in every run, the engine's loop only in some

        pause = WAIT_FIRST
        turn: asyncio.Event | None = None
        granted = False
        try:
            while True:
                verdict = self.ledger.reserve(worst, lambda left: self._refusal(request, worst, left))
                if verdict is None:
                    granted = True
                    return
                if verdict != WAIT:
                    raise BudgetReached(verdict)
                if turn is None:
                    turn = asyncio.Event()
                    self._waiting.append(turn)
                while True:  # until woken, or the newest waiter's look at the ledger is due
                    turn.clear()
                    try:
                        await asyncio.wait_for(turn.wait(), pause)
                        break
                    except TimeoutError:
                        pause = min(pause * 2, WAIT_MOST)
                        if turn is self._waiting[-1]:
                            break
        finally:
            if turn is not None:
                self._waiting.remove(turn)
                if self._waiting and turn.is_set() and not granted:  # woken, then cancelled or refused
                    self._waiting[-1].set()

    def _refusal(self, request: ChatRequest, worst: Cost, left: Cost) -> str:
        limits = self.ledger.limits
        if limits.nanousd is not None and worst.nanousd > left.nanousd:
            need = format_dollars(worst.nanousd)
            have = f"{format_dollars(max(left.nanousd, 0))} of {format_dollars(limits.nanousd)}"
        else:
            need, have = f"{worst.tokens:,} tokens", f"{max(left.tokens, 0):,} of {limits.tokens or 0:,} tokens"
        prompt = self.worst_case(request, with_cap=False)
        fits = (limits.nanousd is None or prompt.nanousd <= left.nanousd) and (
            limits.tokens is None or prompt.tokens <= left.tokens)
        hint = f"; the prompt fits, its output cap does not: lower it with {self.cap_flag} N" if fits else ""
        return (f"budget reached: a {request.role} call to {request.model} may cost up to {need} (its prompt "
                f"and the {reserved_cap(request):,}-token output cap), and {have} is left{hint}")

    async def aclose(self) -> None:
        try:
            await self.inner.aclose()
        finally:
            try:
                self.ledger.finish()
            finally:
                self.ledger.close()


def describe(cost: Cost) -> str:
    return f"{format_dollars(cost.nanousd)} ({cost.tokens:,} tokens)"


class BudgetError(ValueError):
    """A budget that cannot hold (a model without a price); the message names the flags."""


def check_budget(settings: Settings, flags: tuple[str, str] = ("--geo-budget", "--geo-budget-tokens"),
                 price_option: str = "the ini option geo_prices",
                 roles: tuple[str, ...] = ("ranker", "rewriter")) -> None:
    """At start, before any call: a dollar budget needs a price for every model the run's
    rows call (ranker and rewriter; prompt procedures use the rewriter's), unless a token
    budget bounds them too."""
    if BudgetLimits.of(settings).active and not settings.mock and not locks_available():
        raise BudgetError(f"{flags[0]}: a budget needs file locks (fcntl), which this platform does not have; "
                          f"run without {flags[0]} and {flags[1]}")
    if settings.budget is None or settings.budget_tokens is not None or settings.mock:
        return
    named = [(f"{role} model", settings.models[role]) for role in roles]
    if "ranker" in roles:  # the rows' other models: --geo-judge's, and a variant's rewriter (PATH@MODEL)
        named += [(f"judge {j.name}'s model", j.model) for j in settings.judges]
        named += [(f"variant {name}'s rewriter model", model) for name, model in settings.variant_models.items()]
    for who, model in named:
        name, url = priced_as(model, settings)
        if name not in price_table(settings.prices, url):
            why = " (the built-in prices are OpenAI's, for its own API only)" if name in BUILTIN_PRICES else ""
            raise BudgetError(f"{flags[0]}: no price for the {who} {model}{why}, so its calls cannot be held to "
                              f"a budget in dollars: add it to {price_option}, or bound tokens with {flags[1]} N")


def priced_as(model: str, settings: Settings) -> tuple[str, str]:
    """The name `model` is priced under (the one its endpoint is sent, llm/endpoints.py)
    and the URL of the server it is sent to (its prices depend on it: llm/prices.py)."""
    from pytest_geo.llm.endpoints import EndpointError, resolve
    from pytest_geo.llm.providers import ProviderError

    try:
        endpoint, name = resolve(model, settings.endpoints)
    except (EndpointError, ProviderError):  # said at start, when the stack is built
        return model, server_url(settings.base_url)
    return name, server_url(settings.base_url) if endpoint is None else endpoint.base_url


def shared_ledger(settings: Settings) -> Ledger | None:
    """The run's one ledger, for every endpoint's calls; None without a budget (or with the mock)."""
    limits = BudgetLimits.of(settings)
    if not limits.active or settings.mock:
        return None
    return Ledger(limits, settings.budget_ledger)


def with_budget(inner: ChatClient, settings: Settings, ledger: Ledger | None = None) -> ChatClient:
    """`inner` behind the run's budget, when it has one (the mock costs nothing: none);
    `ledger`: the run's, when endpoints share it."""
    ledger = ledger or shared_ledger(settings)
    if ledger is None:
        return inner
    from pytest_geo.llm.batch import BATCH_ROLES

    return BudgetClient(inner, ledger, price_table(settings.prices, server_url(settings.base_url)),
                        BATCH_ROLES if settings.batch else frozenset(),
                        OUTPUT_CAP_FLAGS[settings.front_end])


def budget_status(settings: Settings) -> BudgetStatus | None:
    """The shared ledger's state (read at the end of a run); None without a budget."""
    limits = BudgetLimits.of(settings)
    if not limits.active:
        return None
    if settings.budget_ledger is None or settings.mock:
        return BudgetStatus(limits, Cost(), Cost(), 0, None)
    ledger = Ledger(limits, settings.budget_ledger)
    try:
        return ledger.status()
    finally:
        ledger.close()
