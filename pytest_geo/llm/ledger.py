"""The ledger of a run's budget: what was spent, what calls in flight hold, and why calls
stopped, shared exactly by every process of the run.

It is one small JSON file locked with `fcntl.flock` around each read-modify-write: the
plugin's process and its pytest-xdist workers all open the file the controller created,
so they share one budget whichever worker needs it (no shares to hand over when a worker
finishes early, nothing stranded). A reservation is keyed by the process holding it; a
process that died holding one leaves it charged in full (its calls may have been billed).
Without a file (a caller of the engine who names none) the ledger lives in memory.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

from pytest_geo.llm.file_lock import lock, unlock
from pytest_geo.llm.prices import format_dollars
from pytest_geo.price import NANO_PER_DOLLAR
from pytest_geo.settings import Settings

T = TypeVar("T")
WAIT = ""  # Ledger.reserve's answer while reservations in flight must settle first


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
    # Worst cases charged for calls whose cost is unknown: their answer never came though
    # the server may have billed them (timeouts, dropped connections, calls cancelled in
    # flight), or it came without believable usage.
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
                     "charged for calls whose cost is unknown: cut off before their answer, or answered "
                     "without usage)")
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
        self._file: BinaryIO | None = None
        self._opened_by = 0  # the process that opened it: a lock is shared with a forked child

    @staticmethod
    def create(directory: Path | None = None) -> Path:
        """A new empty ledger file (the controller's: workers open it by its path)."""
        fd, name = tempfile.mkstemp(prefix="pytest-geo-budget-", suffix=".json", dir=directory)
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(LedgerState().to_json())
        return Path(name)

    def _transact(self, change: Callable[[LedgerState], T]) -> T:
        """`change` applied to the state under the file's lock. The file stays open for
        the ledger's life (a budgeted call makes two transactions: opening the file each
        time cost more than the rest of them), is written only when the state changed,
        and in place: the new text padded with spaces to the old one's length (JSON allows
        them), so it is one write and the file's blocks are never freed and allocated
        again. A write cut short (a kill) leaves text that does not parse: unreadable."""
        if self.path is None:
            return change(self._memory)
        if self._file is None or self._opened_by != os.getpid():  # a forked child locks its own
            self._file = self.path.open("r+b", buffering=0)
            self._opened_by = os.getpid()
        fd = self._file.fileno()
        lock(fd)
        try:
            data = os.pread(fd, os.fstat(fd).st_size, 0)
            try:
                state = LedgerState.from_json(data.decode("utf-8"))
            except (ValueError, KeyError, TypeError):  # a process killed mid-write: spend nothing more
                state = LedgerState(reached=f"budget ledger {self.path} is unreadable: no more calls are sent")
            result = change(state)
            text = state.to_json().encode("utf-8")
            if text != data.rstrip(b" "):
                os.pwrite(fd, text.ljust(len(data)), 0)
            return result
        finally:
            unlock(fd)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

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

    def stop(self, reason: str) -> str:
        """No more calls are sent; returns why (the first reason given, if one was)."""

        def change(state: LedgerState) -> str:
            state.refused_calls += 1
            state.reached = state.reached or reason
            return state.reached

        return self._transact(change)

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
