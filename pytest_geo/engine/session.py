"""One evaluation run's engine, shared by the plugin and the `egeo` command: the prompts,
the client, the runner, and each row's pending outcome."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Iterable
from concurrent.futures import Future
from typing import Any

from pytest_geo.data.dataset import GeoRow, RowKey
from pytest_geo.data.rewrites_file import check_rewrites, load_rewrites
from pytest_geo.engine.experiment import (
    GeoEngine,
    GeoOutcome,
    GivenRewrites,
    RepeatedOutcome,
    run_repeats,
    run_variant,
)
from pytest_geo.engine.judges import load as load_judges
from pytest_geo.engine.panel import run_panel, shared_before
from pytest_geo.engine.progress import RowTracker, Snapshot, snapshot
from pytest_geo.engine.prompts import PromptSet
from pytest_geo.engine.query_blind import run_prompts
from pytest_geo.engine.runner import Runner
from pytest_geo.engine.shared_rank import SharedRanks
from pytest_geo.engine.variants import load_variants
from pytest_geo.llm.adaptive import ConcurrencyStats
from pytest_geo.llm.base import ChatClient
from pytest_geo.llm.stack import ClientStack, build_stack
from pytest_geo.llm.usage import UsageTable, summed
from pytest_geo.settings import OUTPUT_CAP_FLAGS, Settings

Outcome = GeoOutcome | RepeatedOutcome


def given_rewrites(settings: Settings) -> GivenRewrites | None:
    """The rewrites --geo-rewrites names, read (a RewritesError when malformed)."""
    if settings.rewrites is None:
        return None
    return GivenRewrites(str(settings.rewrites), load_rewrites(settings.rewrites))


class GeoSession:
    """Built on first need, so runs without GEO rows or prompt procedures never need a
    key; the E-GEO prompts are loaded on first use, so suites whose procedures are their
    own prompts need no prompts directory.

    Rows are keyed by where they come from (dataset path and line), never by a name: two
    rows can share a query id, never a line."""

    def __init__(self, settings: Settings, stack: ClientStack | None = None) -> None:
        """`stack`: the client stack (llm/stack.py) the rows call; by default the one the
        settings describe."""
        self.settings = settings
        self.stack = stack or build_stack(settings)
        self.concurrency = self.stack.concurrency
        self.client: ChatClient = self.stack.client
        self.runner = Runner(self.concurrency.rows)
        self.rows = RowTracker()  # rows started, finished, errored and not run, for the progress line
        self._futures: dict[RowKey, Future[Outcome]] = {}
        self.shared_ranks = SharedRanks()  # rank_before per row, shared by its variants

    @functools.cached_property
    def prompts(self) -> PromptSet:
        """The E-GEO prompt set; raises PromptError when it is missing or broken."""
        return run_prompts(self.settings)

    @functools.cached_property
    def engine(self) -> GeoEngine:
        settings = self.settings
        return GeoEngine(self.prompts, self.client, settings.models, settings.temperature,
                         strict_facts=settings.strict_facts, max_output_tokens=settings.max_output_tokens,
                         cap_flag=OUTPUT_CAP_FLAGS[settings.front_end], judges=load_judges(settings.judges),
                         reasoning_effort=settings.reasoning_effort, given=given_rewrites(settings))

    def check_given(self, rows: Iterable[GeoRow]) -> None:
        """With --geo-rewrites: E-GEO's rules for the run's rows (a RewritesError naming the
        file and line), checked before any call; a rewrite naming a query the run lacks is
        refused only when the run is every row (no limit, sample or shard)."""
        given, settings = self.engine.given, self.settings
        if given is not None:
            whole = settings.limit is None and settings.sample is None and settings.shard is None
            check_rewrites(given.path, given.rewrites, rows, every_row=whole)

    @functools.cached_property
    def variant_prompts(self) -> dict[str, PromptSet]:
        """Each --geo-variant's prompt set (the run's, with the variant's rewriter prompts);
        raises PromptError naming the variant's file."""
        return {v.name: v.prompts(self.prompts) for v in load_variants(self.settings.variants)}

    def schedule(self, row: GeoRow) -> Future[Outcome]:
        future = self._futures.get(row.key)
        return future if future is not None else self.schedule_many([row])[0]

    def schedule_many(self, rows: Iterable[GeoRow]) -> list[Future[Outcome]]:
        """Schedule rows not yet scheduled, with one hand-over to the runner's loop."""
        rows = list(rows)
        fresh = [row for row in rows if row.key not in self._futures]
        for row in fresh:
            if row.variant is not None:
                self.shared_ranks.expect(row)  # before any variant of the row can finish
        futures = self.runner.submit_many([functools.partial(self._run, row) for row in fresh], windowed=True)
        self._futures.update((row.key, future) for row, future in zip(fresh, futures, strict=True))
        for row, future in zip(fresh, futures, strict=True):
            if row.variant is not None:
                future.add_done_callback(functools.partial(self._variant_done, row))
        return [self._futures[row.key] for row in rows]

    def _variant_done(self, row: GeoRow, _: Future[Outcome]) -> None:
        self.shared_ranks.release(row)  # finished, failed or cancelled: one user fewer

    def scheduled(self, row: GeoRow) -> Future[Outcome] | None:
        return self._futures.get(row.key)

    def needed(self, row: GeoRow) -> Future[Outcome]:
        """The row's future, for a caller about to wait on it: scheduled if nobody did,
        and started now if it is still queued behind the runner's window."""
        future = self.schedule(row)
        if not future.done():  # the common case once rows run ahead: no maker to build, nothing to hasten
            self.runner.hasten(future, functools.partial(self._run, row))
        return future

    async def _run(self, row: GeoRow) -> Outcome:
        """Runs once the runner gave the row a slot: from here it is in flight."""
        self.rows.started()
        outcome: Outcome | None = None
        try:
            outcome = await self._experiment(row)
            return outcome
        finally:
            if outcome is None:  # cancelled (-x, Ctrl-C, not needed): counted where it was cancelled
                self.rows.left()
            elif outcome.not_run:  # never sent (the server stopped, the budget): not an error
                self.rows.stopped()
            else:
                self.rows.finished(errored=outcome.error is not None)

    def _experiment(self, row: GeoRow) -> Awaitable[Outcome]:
        if self.engine.judges:
            return self._panel(row)
        if row.variant is not None:
            prompts = self.variant_prompts[row.variant]
            model = self.settings.variant_models.get(row.variant)  # None: the run's rewriter
            if self.settings.repeats > 1:
                return run_repeats(self.engine, row, self.settings.repeats, self.settings.seed,
                                   lambda ordered, i: run_variant(self.engine, ordered, prompts, self.shared_ranks, i,
                                                                  model))
            return run_variant(self.engine, row, prompts, self.shared_ranks, rewriter_model=model)
        if self.settings.repeats > 1:
            return run_repeats(self.engine, row, self.settings.repeats, self.settings.seed)
        return self.engine.run(row)

    def _panel(self, row: GeoRow) -> Awaitable[Outcome]:
        """The row judged by every --geo-judge (engine/panel.py); each judge's rank_before
        shared by the row's variants."""
        engine, shared = self.engine, self.shared_ranks
        prompts = self.variant_prompts[row.variant] if row.variant is not None else None
        model = self.settings.variant_models.get(row.variant) if row.variant is not None else None

        def one(ordered: GeoRow, repeat: int) -> Awaitable[GeoOutcome]:
            before = shared_before(engine, ordered, shared, repeat) if row.variant is not None else None
            return run_panel(engine, ordered, prompts, before, model)

        if self.settings.repeats > 1:
            return run_repeats(engine, row, self.settings.repeats, self.settings.seed, one)
        return one(row, 0)

    def outcome(self, row: GeoRow) -> Outcome:
        """Wait for a row (scheduling it now if nobody did); the future is then dropped so
        finished rows do not pile up in memory, and its window place goes to a queued row."""
        future = self.needed(row)
        try:
            return future.result()
        finally:
            self._futures.pop(row.key, None)
            self.runner.consumed(future)

    def evaluate(self, rows: Iterable[GeoRow]) -> list[GeoOutcome]:
        rows = list(rows)
        self.schedule_many(rows)
        outcomes = [self.outcome(row) for row in rows]
        single = [o for o in outcomes if isinstance(o, GeoOutcome)]
        if len(single) != len(outcomes):
            raise ValueError("evaluate() gives one outcome per row: use it with repeats = 1")
        return single

    def progress(self, selected: int) -> Snapshot:
        """Where the run is, read from the main thread while rows run."""
        return snapshot(self.rows.counts, self.stack.usage_table(), selected, priced=self.stack.priced)

    def usage_table(self) -> UsageTable:
        """Model usage per role, over every endpoint. Read it after `close`."""
        return self.stack.usage_table()

    def endpoint_usage(self) -> UsageTable:
        """Model usage of each endpoint called, over its roles. Read it after `close`."""
        return {name: summed(table) for name, table in self.stack.usage_by_endpoint().items()}

    def usage_by_endpoint(self) -> dict[str, UsageTable]:
        """Model usage per role of each endpoint called (`default`: the default server)."""
        return self.stack.usage_by_endpoint()

    @property
    def stopped(self) -> str | None:
        """Why a model server is no longer called (fail fast, circuit breaker), or None."""
        return self.stack.stopped

    def row_limit(self) -> int:
        """Rows allowed in flight now (moves under --geo-concurrency auto)."""
        return self.runner.slots.limit

    def request_changes(self) -> list[dict[str, object]]:
        """What the server refused and how requests changed (llm/healing.py), as plain data."""
        return self.stack.request_changes()

    def concurrency_stats(self) -> ConcurrencyStats:
        """The concurrency reached and the 429s seen. Read it after `close`."""
        return self.concurrency.stats()

    def concurrency_told(self) -> dict[str, Any] | None:
        """`concurrency_stats` as the reports tell them; None when no model call was made
        (a failed collection, every row skipped): there is no concurrency to tell."""
        return self.concurrency.stats().as_json() if self.usage_table() else None

    def cancel(self, row: GeoRow) -> None:
        """Drop a scheduled row that is no longer needed (--geo-sequential); one already
        running finishes, and its outcome is never read."""
        future = self._futures.pop(row.key, None)
        if future is not None:
            if future.cancel():
                self.rows.cancelled(1)
            self.runner.consumed(future)  # finished already (cancel refused): its place is free too

    def cancel_pending(self) -> int:
        cancelled = self.runner.cancel_pending()
        self.rows.cancelled(cancelled)
        return cancelled

    def close(self) -> None:
        self.runner.close(self.client)
