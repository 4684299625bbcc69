"""A spending limit that is never crossed (`--geo-budget DOLLARS`, `--geo-budget-tokens N`).

Before a call is sent it reserves its worst case: an upper bound of its prompt's tokens
(`prompt_token_bound`) plus its output-token cap, priced at its model's list price (the
Batch API's discount included). When the answer comes the reservation is replaced by what
the server reported. A call whose worst case would cross the limit waits while other calls
hold reservations (their answers usually cost less, and free the difference); once it
could not fit even if every reservation were released, the budget is reached: that call
and every later one raise BudgetReached (a ServerUnusable, so its row counts as not run).

The ledger of what was spent and reserved is one small JSON file locked with `fcntl.flock`
around each read-modify-write: the plugin's process and its pytest-xdist workers all open
the file the controller created, so they share one budget exactly, whichever worker needs
it (no shares to hand over when a worker finishes early). A reservation is keyed by the
process holding it; a process that died holding one leaves it charged in full (its calls
may have been billed). Without a file (a caller of the engine who names none) the ledger
lives in memory.

Calls the cache answers never reach this layer: it sits below the cache.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from pytest_geo.llm.base import ChatClient, ChatRequest, ChatResponse, ModelError, ServerUnusable
from pytest_geo.llm.prices import NANO_PER_DOLLAR, Price, format_dollars, price_table
from pytest_geo.settings import Settings

T = TypeVar("T")

# The output cap reserved for a request that names none (ChatRequest.max_output_tokens is
# None), which the layer then sets on the request, so the cap it reserved is the cap sent.
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
WAIT = ""  # Ledger.reserve's answer while reservations in flight must settle first


def prompt_token_bound(request: ChatRequest) -> int:
    """At least as many tokens as the request's prompt can be billed for, without a tokenizer.

    OpenAI's tokenizers (GPT-2's, cl100k_base, o200k_base) are byte-level BPE: the text is
    encoded as UTF-8, every byte starts as one token, and each merge joins two adjacent
    tokens into one, so no text has more tokens than bytes. SentencePiece tokenizers with
    byte fallback (Llama, Mistral) are bounded the same way: a piece covers at least one
    character, or is one byte. Each message's role and text are counted in bytes, plus
    MESSAGE_OVERHEAD for the chat format around it, plus REQUEST_OVERHEAD for the answer's
    priming and the response schema's bytes plus SCHEMA_OVERHEAD when one is sent. The
    bound is loose for English (about 4 bytes a token) and tight for text that tokenizes
    badly, which is the case it must hold for."""
    total = REQUEST_OVERHEAD
    for message in request.messages:
        total += MESSAGE_OVERHEAD + sum(len(str(value).encode("utf-8")) for value in message.values())
    if request.response_schema is not None:
        total += SCHEMA_OVERHEAD + len(json.dumps(request.response_schema, ensure_ascii=False).encode("utf-8"))
    return total


@dataclass(frozen=True)
class Cost:
    nanousd: int = 0
    tokens: int = 0

    def __add__(self, other: Cost) -> Cost:
        return Cost(self.nanousd + other.nanousd, self.tokens + other.tokens)

    def __sub__(self, other: Cost) -> Cost:
        return Cost(self.nanousd - other.nanousd, self.tokens - other.tokens)

    def exceeds(self, other: Cost) -> bool:
        return self.nanousd > other.nanousd or self.tokens > other.tokens


@dataclass(frozen=True)
class BudgetLimits:
    """The run's bounds; None: that bound is not set. Both hold when both are set."""

    nanousd: int | None = None
    tokens: int | None = None

    @classmethod
    def of(cls, settings: Settings) -> BudgetLimits:
        dollars = settings.budget
        return cls(None if dollars is None else round(dollars * NANO_PER_DOLLAR), settings.budget_tokens)

    @property
    def active(self) -> bool:
        return self.nanousd is not None or self.tokens is not None

    def fits(self, cost: Cost) -> bool:
        return ((self.nanousd is None or cost.nanousd <= self.nanousd)
                and (self.tokens is None or cost.tokens <= self.tokens))

    def describe(self) -> str:
        parts = [format_dollars(self.nanousd)] if self.nanousd is not None else []
        parts += [f"{self.tokens:,} tokens"] if self.tokens is not None else []
        return " and ".join(parts)


@dataclass
class LedgerState:
    """What the run has spent, what calls in flight hold, and why calls stopped (if they did)."""

    spent: Cost = Cost()  # what servers reported for the answers that came
    # Worst cases charged for calls whose answer never came though the server may have
    # billed them (timeouts, dropped connections, calls cancelled in flight).
    unknown: Cost = Cost()
    reserved: dict[str, Cost] = field(default_factory=dict)  # process id -> what its calls hold
    refused_calls: int = 0
    reached: str | None = None  # why calls are no longer sent: one message for the run

    def held(self) -> Cost:
        return sum(self.reserved.values(), Cost())

    def charged(self) -> Cost:
        return self.spent + self.unknown

    def to_json(self) -> str:
        return json.dumps({
            "spent": [self.spent.nanousd, self.spent.tokens], "unknown": [self.unknown.nanousd, self.unknown.tokens],
            "reserved": {owner: [c.nanousd, c.tokens] for owner, c in self.reserved.items()},
            "refused_calls": self.refused_calls, "reached": self.reached,
        })

    @classmethod
    def from_json(cls, text: str) -> LedgerState:
        data = json.loads(text)
        return cls(Cost(*data["spent"]), Cost(*data["unknown"]),
                   {owner: Cost(*pair) for owner, pair in data["reserved"].items()},
                   data["refused_calls"], data["reached"])


@dataclass(frozen=True)
class BudgetStatus:
    """The budget at the end of a run, for the summary and the reports."""

    limits: BudgetLimits
    spent: Cost
    unknown: Cost
    refused_calls: int
    reached: str | None

    def as_json(self) -> dict[str, Any]:
        def usd(nanousd: int | None) -> float | None:
            return None if nanousd is None else nanousd / NANO_PER_DOLLAR

        return {"budget_usd": usd(self.limits.nanousd), "budget_tokens": self.limits.tokens,
                "spent_usd": usd(self.spent.nanousd), "spent_tokens": self.spent.tokens,
                "unknown_usd": usd(self.unknown.nanousd), "unknown_tokens": self.unknown.tokens,
                "refused_calls": self.refused_calls, "reached": self.reached}

    def line(self) -> str:
        """`budget: $0.0412 spent of $0.05` (and tokens), with what is charged for calls
        cut off and, once reached, why."""
        parts = []
        if self.limits.nanousd is not None:
            parts.append(f"{format_dollars(self.spent.nanousd)} spent of {format_dollars(self.limits.nanousd)}")
        if self.limits.tokens is not None:
            parts.append(f"{self.spent.tokens:,} tokens spent of {self.limits.tokens:,}")
        text = "budget: " + ", ".join(parts)
        if self.unknown.nanousd or self.unknown.tokens:
            text += (f" (and up to {format_dollars(self.unknown.nanousd)}, {self.unknown.tokens:,} tokens "
                     "charged for calls cut off before their answer)")
        if self.reached is not None:
            text += f"; {self.reached}"
        return text


class Ledger:
    """The run's spending, in the file at `path` shared by every process of the run, or in
    memory (`path` None)."""

    def __init__(self, limits: BudgetLimits, path: Path | None = None) -> None:
        self.limits = limits
        self.path = path
        self._memory = LedgerState()
        self.owner = str(os.getpid())

    @staticmethod
    def create(directory: Path | None = None) -> Path:
        """A new empty ledger file (the controller's: workers open it by its path)."""
        fd, name = tempfile.mkstemp(prefix="pytest-geo-budget-", suffix=".json", dir=directory)
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(LedgerState().to_json())
        return Path(name)

    def _transact(self, change: Callable[[LedgerState], T]) -> T:
        if self.path is None:
            return change(self._memory)
        with self.path.open("r+", encoding="utf-8") as file:
            fcntl.flock(file, fcntl.LOCK_EX)  # released when the file closes
            text = file.read()
            try:
                state = LedgerState.from_json(text)
            except (ValueError, KeyError, TypeError):  # a process killed mid-write: spend nothing more
                state = LedgerState(reached=f"budget ledger {self.path} is unreadable: no more calls are sent")
            result = change(state)
            file.seek(0)
            file.truncate()
            file.write(state.to_json())
            return result

    def reserve(self, worst: Cost, refusal: Callable[[Cost], str]) -> str | None:
        """Hold `worst` for a call: None once held; WAIT while it fits only once reservations
        in flight settle; else why it is refused (`refusal` says so from what is left)."""

        def change(state: LedgerState) -> str | None:
            if state.reached is None and not self.limits.fits(state.charged() + worst):
                state.reached = refusal(self._left(state.charged()))  # never fits, whatever is released
            if state.reached is not None:
                state.refused_calls += 1
                return state.reached
            if not self.limits.fits(state.charged() + state.held() + worst):
                self._charge_the_dead(state)
                return WAIT
            state.reserved[self.owner] = state.reserved.get(self.owner, Cost()) + worst
            return None

        return self._transact(change)

    def settle(self, worst: Cost, actual: Cost | None, overrun: Callable[[], str] | None = None) -> None:
        """Replace a reservation by what its answer cost; `actual` None: the answer never
        came, though the call may have been billed: its worst case is charged. An answer
        that cost more than its worst case stops the budget (`overrun` says why)."""

        def change(state: LedgerState) -> None:
            state.reserved[self.owner] = state.reserved.get(self.owner, Cost()) - worst
            if state.reserved[self.owner] == Cost():
                del state.reserved[self.owner]
            if actual is None:
                state.unknown += worst
                return
            state.spent += actual
            if actual.exceeds(worst) and state.reached is None and overrun is not None:
                state.reached = overrun()

        self._transact(change)

    def status(self) -> BudgetStatus:
        def read(state: LedgerState) -> BudgetStatus:
            return BudgetStatus(self.limits, state.spent, state.unknown + state.held(), state.refused_calls,
                                state.reached)

        return self._transact(read)

    def _left(self, charged: Cost) -> Cost:
        return Cost(0 if self.limits.nanousd is None else self.limits.nanousd - charged.nanousd,
                    0 if self.limits.tokens is None else self.limits.tokens - charged.tokens)

    def _charge_the_dead(self, state: LedgerState) -> None:
        """Reservations of processes that are gone (a crashed worker) will never settle."""
        for owner in [o for o in state.reserved if o != self.owner and not _alive(int(o))]:
            state.unknown += state.reserved.pop(owner)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process under that id
        return True
    return True


class BudgetReached(ServerUnusable):
    """The call was not sent: its worst case does not fit in what is left of the budget."""


class BudgetClient:
    """Reserves each call's worst case in the ledger before it goes to `inner`."""

    def __init__(self, inner: ChatClient, ledger: Ledger, prices: Mapping[str, Price],
                 batch_roles: frozenset[str] = frozenset()) -> None:
        self.inner = inner
        self.ledger = ledger
        self.prices = dict(prices)
        self.batch_roles = batch_roles  # roles whose calls go through the Batch API (half price)
        # Set when a call of this process settles, waking its calls waiting for budget at
        # once (other processes' settlements are seen at the next look).
        self._settled: Any = None  # asyncio.Event, made on the loop that waits

    def worst_case(self, request: ChatRequest) -> Cost:
        prompt = prompt_token_bound(request)
        cap = request.max_output_tokens or 0
        price = self.prices.get(request.model)
        nanousd = price.nanodollars(prompt, cap, request.role in self.batch_roles) if price is not None else 0
        return Cost(nanousd, prompt + cap)

    def actual(self, request: ChatRequest, response: ChatResponse) -> Cost:
        price = self.prices.get(request.model)
        tokens = response.prompt_tokens + response.completion_tokens
        nanousd = price.nanodollars(response.prompt_tokens, response.completion_tokens, response.batch) if price else 0
        return Cost(nanousd, tokens)

    async def complete(self, request: ChatRequest) -> ChatResponse:
        if request.max_output_tokens is None:
            request = replace(request, max_output_tokens=DEFAULT_OUTPUT_CAP)
        if self.ledger.limits.nanousd is not None and request.model not in self.prices:
            if self.ledger.limits.tokens is None:  # checked at start (check_budget); a custom client's model
                raise BudgetReached(f"budget: no price for model {request.model}: the call was not sent")
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
        actual = self.actual(request, response)
        self._settle(worst, actual, lambda: (
            f"budget stopped: a {request.role} call to {request.model} was billed {describe(actual)}, more than "
            f"its reserved worst case {describe(worst)} (did the server ignore the output-token cap?)"))
        return response

    def _settle(self, worst: Cost, actual: Cost | None, overrun: Callable[[], str] | None = None) -> None:
        self.ledger.settle(worst, actual, overrun)
        if self._settled is not None:
            self._settled.set()
            self._settled = None

    async def _reserve(self, request: ChatRequest, worst: Cost) -> None:
        import asyncio  # here: the plugin reads budgets in every run, the engine's loop only in some

        pause = WAIT_FIRST
        while True:
            verdict = self.ledger.reserve(worst, lambda left: self._refusal(request, worst, left))
            if verdict is None:
                return
            if verdict != WAIT:
                raise BudgetReached(verdict)
            if self._settled is None:
                self._settled = asyncio.Event()
            try:
                await asyncio.wait_for(self._settled.wait(), pause)
            except TimeoutError:
                pause = min(pause * 2, WAIT_MOST)

    def _refusal(self, request: ChatRequest, worst: Cost, left: Cost) -> str:
        limits = self.ledger.limits
        if limits.nanousd is not None and worst.nanousd > left.nanousd:
            need = format_dollars(worst.nanousd)
            have = f"{format_dollars(max(left.nanousd, 0))} of {format_dollars(limits.nanousd)}"
        else:
            need, have = f"{worst.tokens:,} tokens", f"{max(left.tokens, 0):,} of {limits.tokens or 0:,} tokens"
        return (f"budget reached: a {request.role} call to {request.model} may cost up to {need} (its prompt "
                f"and the {request.max_output_tokens or 0:,}-token output cap), and {have} is left")

    async def aclose(self) -> None:
        await self.inner.aclose()


def describe(cost: Cost) -> str:
    return f"{format_dollars(cost.nanousd)} ({cost.tokens:,} tokens)"


class BudgetError(ValueError):
    """A budget that cannot hold (a model without a price); the message names the flags."""


def check_budget(settings: Settings, flags: tuple[str, str] = ("--geo-budget", "--geo-budget-tokens"),
                 price_option: str = "the ini option geo_prices") -> None:
    """At start, before any call: a dollar budget needs a price for every model the run's
    rows call (ranker and rewriter; prompt procedures use the rewriter's), unless a token
    budget bounds them too."""
    if settings.budget is None or settings.budget_tokens is not None or settings.mock:
        return
    prices = price_table(settings.prices)
    for role in ("ranker", "rewriter"):
        model = settings.models[role]
        if model not in prices:
            raise BudgetError(f"{flags[0]}: no price for the {role} model {model}, so its calls cannot be held to "
                              f"a budget in dollars: add it to {price_option}, or bound tokens with {flags[1]} N")


def with_budget(inner: ChatClient, settings: Settings) -> ChatClient:
    """`inner` behind the run's budget, when it has one (the mock costs nothing: none)."""
    limits = BudgetLimits.of(settings)
    if not limits.active or settings.mock:
        return inner
    from pytest_geo.llm.batch import BATCH_ROLES

    return BudgetClient(inner, Ledger(limits, settings.budget_ledger), price_table(settings.prices),
                        BATCH_ROLES if settings.batch else frozenset())


def budget_status(settings: Settings) -> BudgetStatus | None:
    """The shared ledger's state (read at the end of a run); None without a budget."""
    limits = BudgetLimits.of(settings)
    if not limits.active:
        return None
    if settings.budget_ledger is None or settings.mock:
        return BudgetStatus(limits, Cost(), Cost(), 0, None)
    return Ledger(limits, settings.budget_ledger).status()
