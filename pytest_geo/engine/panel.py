"""One row judged by a panel (`--geo-judge`): each judge ranks the original candidates
(rank_before, shared by the row's variants), the rewriter rewrites the target once, and
each judge ranks again with the rewrite (rank_after). J judges and V variants make
J + V + J x V calls a row.

A judge that fails leaves its own cell empty (its error kept) and the other judges
finish; the rewrite failing fails the row. The row's top-level ranks are the means over
the judges that scored it, so its rank_improvement is the panel's; its error names the
first judge that failed, so the item fails naming it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from pytest_geo.data.dataset import GeoRow
from pytest_geo.data.egeo_data import cached_flags, cached_order
from pytest_geo.data.record import ModelCall
from pytest_geo.engine.answers import Judgement
from pytest_geo.engine.experiment import GeoEngine, GeoOutcome, Shown, fact_violations, one_line, place
from pytest_geo.engine.judges import Judge
from pytest_geo.engine.prompts import PromptSet
from pytest_geo.engine.shared_rank import SharedRanks
from pytest_geo.llm.base import ServerUnusable

Order = tuple[Judgement, tuple[ModelCall, ...]]  # a judge's ranking of the originals, and its calls
Before = Callable[[Judge], Awaitable[Order]]


@dataclass(frozen=True)
class JudgeOutcome:
    """One judge's cell of a row: its ranks, or why it has none."""

    name: str
    rank_before: int | None = None
    rank_after: int | None = None
    error: str | None = None
    order_before: tuple[str, ...] = ()  # its ranking of the original candidates, best first
    not_run: bool = False  # its server was found unusable
    # With E-GEO's answers: whether it listed the target as questionable; None: not known
    # (the ordinary answer, or a cached before-ranking without the list).
    flagged_before: bool | None = None
    flagged_after: bool | None = None

    @property
    def rank_improvement(self) -> int | None:
        if self.error is not None or self.rank_before is None or self.rank_after is None:
            return None
        return self.rank_before - self.rank_after

    def record(self) -> dict[str, Any]:
        cell = {"rank_before": self.rank_before, "rank_after": self.rank_after,
                "rank_improvement": self.rank_improvement, "error": self.error,
                "order_before": list(self.order_before)}
        if self.flagged_before is not None:
            cell["flagged_before"] = self.flagged_before
        if self.flagged_after is not None:
            cell["flagged_after"] = self.flagged_after
        return cell


def _mean(values: list[int]) -> float | None:
    return sum(values) / len(values) if values else None


async def _ranked_before(engine: GeoEngine, row: GeoRow, judge: Judge) -> Order:
    calls: list[ModelCall] = []
    judged = await engine.ranking(row, row.candidates, calls, "rank_before", judge)
    return judged, tuple(calls)


def shared_before(engine: GeoEngine, row: GeoRow, shared: SharedRanks, repeat: int = 0) -> Before:
    """Each judge's rank_before of `row`, shared by the row's variants (and kept per repeat)."""
    def before(judge: Judge) -> Awaitable[Order]:
        return shared.rank(row, repeat, lambda: _ranked_before(engine, row, judge), judge.name)
    return before


@dataclass
class _Calls:
    """A panel row's calls, kept apart so they are reported in experiment order."""

    before: dict[str, list[ModelCall]]
    rewrite: list[ModelCall]
    after: dict[str, list[ModelCall]]

    def in_order(self, judges: Iterable[Judge]) -> tuple[ModelCall, ...]:
        names = [j.name for j in judges]
        return (*(c for n in names for c in self.before[n]), *self.rewrite,
                *(c for n in names for c in self.after[n]))


async def run_panel(engine: GeoEngine, row: GeoRow, prompts: PromptSet | None = None,
                    before: Before | None = None, rewriter_model: str | None = None) -> GeoOutcome:
    """The experiment with every judge of `engine.judges`; `before` gives a judge's
    rank_before (shared by variants), else each is asked here."""
    started = time.perf_counter()
    judges = engine.judges
    shown = engine.shown(row.candidates)
    calls = _Calls({j.name: [] for j in judges}, [], {j.name: [] for j in judges})
    befores = {j.name: _before(engine, row, j, before, calls.before[j.name]) for j in judges}
    try:
        rewritten = await engine.rewrite(row, prompts, calls.rewrite, rewriter_model)
    except asyncio.CancelledError:
        await _stop(befores.values())
        raise
    except Exception as exc:  # no rewrite: no judge can score the row
        await _stop(befores.values())
        why = one_line(exc)
        cells = [JudgeOutcome(j.name, error=f"no rewrite: {why}") for j in judges]
        return _outcome(row, None, why, isinstance(exc, ServerUnusable), (), calls.in_order(judges), cells, started)
    violations = fact_violations(row, rewritten)
    after_shown = shown.rewritten(row.target_id, rewritten)
    cells = list(await asyncio.gather(*(_judged(engine, row, j, befores[j.name], after_shown, calls.after[j.name])
                                        for j in judges)))
    error, not_run = _panel_error(cells)
    if error is None and engine.strict_facts and violations:
        error = f"new facts not in the original: {', '.join(violations)} (--geo-strict-facts)"
    return _outcome(row, rewritten, error, not_run, violations, calls.in_order(judges), cells, started)


def _before(engine: GeoEngine, row: GeoRow, judge: Judge, before: Before | None,
            calls: list[ModelCall]) -> asyncio.Future[Judgement]:
    """The judge's rank_before, started; a cached one (E-GEO's judges' before-rankings
    ship as files) is read at once, so a query its cache leaves out is known to fail
    before the judge's rank_after is asked."""
    done: asyncio.Future[Judgement] = asyncio.get_running_loop().create_future()
    try:
        cached = cached_order(row, judge.name)
    except ValueError as exc:
        done.set_exception(exc)
        return done
    if cached is None:
        return asyncio.ensure_future(_rank_before(engine, row, judge, before, calls))
    done.set_result(Judgement(list(cached), cached_flags(row, judge.name)))
    return done


async def _rank_before(engine: GeoEngine, row: GeoRow, judge: Judge, before: Before | None,
                       calls: list[ModelCall]) -> Judgement:
    order, made = await (_ranked_before(engine, row, judge) if before is None else before(judge))
    calls.extend(ModelCall(**c) for c in made)
    return order


async def _judged(engine: GeoEngine, row: GeoRow, judge: Judge, before: asyncio.Future[Judgement],
                  after_shown: Shown, calls: list[ModelCall]) -> JudgeOutcome:
    """One judge's cell once its rank_before and rank_after are in; either failing leaves
    it empty, and a rank_before that has failed already asks nothing more."""
    failed = before.exception() if before.done() and not before.cancelled() else None
    if isinstance(failed, Exception):
        return _failed(judge, failed)
    after = engine.ranking(row, after_shown, calls, "rank_after", judge)
    got = await asyncio.gather(before, after, return_exceptions=True)
    for result in got:
        if isinstance(result, BaseException):
            if not isinstance(result, Exception):
                raise result
            return _failed(judge, result)
    judged_before, judged_after = got
    assert isinstance(judged_before, Judgement) and isinstance(judged_after, Judgement)
    was, now = place(judged_before, row.target_id), place(judged_after, row.target_id)
    return JudgeOutcome(judge.name, was.rank, now.rank, order_before=tuple(judged_before.order),
                        flagged_before=was.flagged, flagged_after=now.flagged)


def _failed(judge: Judge, exc: BaseException) -> JudgeOutcome:
    """The judge's empty cell: the error saying which model (and so which endpoint,
    `ep2/m`) the judge asked, and whether its server was found unusable."""
    error = one_line(exc)
    if judge.model not in error:
        error = f"{error} (model {judge.model})"
    return JudgeOutcome(judge.name, error=error, not_run=isinstance(exc, ServerUnusable))


def _panel_error(cells: list[JudgeOutcome]) -> tuple[str | None, bool]:
    """The row's error naming every judge that failed, and whether none of them could run."""
    failed = [c for c in cells if c.error is not None]
    if not failed:
        return None, False
    return "; ".join(f"judge {c.name}: {c.error}" for c in failed), all(c.not_run for c in cells)


def _outcome(row: GeoRow, rewritten: str | None, error: str | None, not_run: bool, violations: tuple[str, ...],
             calls: tuple[ModelCall, ...], cells: list[JudgeOutcome], started: float) -> GeoOutcome:
    """The row's outcome: its ranks the means over the judges that scored it; its wall
    time from `started` (perf_counter), JUnit's time for the row."""
    scored = [c for c in cells if c.rank_improvement is not None]
    if error is not None:
        calls = tuple(ModelCall(**c) for c in calls)
    before_mean = _mean([c.rank_before for c in scored if c.rank_before is not None])
    after_mean = _mean([c.rank_after for c in scored if c.rank_after is not None])
    return GeoOutcome(row.query_id, row.target_id, before_mean, after_mean, rewritten, error, (), violations,
                      calls, not_run, tuple(cells), seconds=time.perf_counter() - started)


async def _stop(given: Iterable[asyncio.Future[Any]]) -> None:
    """Cancel what is still running and wait for it (its errors read, never logged)."""
    tasks = list(given)
    running = [t for t in tasks if not t.done()]
    for task in running:
        task.cancel()
    if running:
        await asyncio.wait(running)
    for task in tasks:
        if not task.cancelled():
            task.exception()
