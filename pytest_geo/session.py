"""One evaluation run's engine, shared by the plugin and the `egeo` command: the prompts,
the client, the runner (or, for large mock runs, a forked helper), and each row's
pending outcome."""

from __future__ import annotations

import concurrent.futures
import functools
from typing import Awaitable, Iterable

from pytest_geo.data import GeoRow
from pytest_geo.geo import GeoEngine, GeoOutcome, RepeatedOutcome, run_repeats
from pytest_geo.llm.base import ChatClient
from pytest_geo.llm.factory import build_client, with_cache
from pytest_geo.llm.usage import UsageClient, UsageTable, merge_usage
from pytest_geo.offload import Offload, OffloadedRow, can_offload
from pytest_geo.prompts import PromptSet, load_prompts
from pytest_geo.runner import BoundedClient, Runner
from pytest_geo.settings import Settings

REQUESTS_PER_ROW = 2  # rank_before and the rewrite overlap; rank_after follows them


class GeoSession:
    """Built on first need, so runs without GEO rows or prompt procedures never need a
    key; the E-GEO prompts are loaded on first use, so suites whose procedures are their
    own prompts need no prompts directory."""

    def __init__(self, settings: Settings, client: ChatClient | None = None) -> None:
        self.settings = settings
        backend = client or build_client(settings)
        # Usage(Cache(Bounded(backend))): a cache hit never waits for a request slot.
        # `concurrency` counts rows; a row makes at most two calls at once (rank_before and
        # the rewrite), so 2N request slots never hold a plain row back, and they still
        # bound --geo-repeats (K experiments per row) and anything else sharing the client.
        requests = REQUESTS_PER_ROW * settings.concurrency
        self.usage = UsageClient(with_cache(BoundedClient(backend, requests), backend, settings))
        self.client: ChatClient = self.usage
        self.runner = Runner(settings.concurrency)
        self._custom_client = client is not None
        self._offloads: list[Offload] = []
        self._futures: dict[str, concurrent.futures.Future[GeoOutcome | RepeatedOutcome] | OffloadedRow] = {}

    @functools.cached_property
    def prompts(self) -> PromptSet:
        """The E-GEO prompt set; raises PromptError when it is missing or broken."""
        return load_prompts(self.settings.prompts_dir)

    @functools.cached_property
    def engine(self) -> GeoEngine:
        settings = self.settings
        return GeoEngine(self.prompts, self.client, settings.models, settings.temperature,
                         strict_facts=settings.strict_facts)

    def schedule(self, key: str, row: GeoRow) -> concurrent.futures.Future[GeoOutcome | RepeatedOutcome] | OffloadedRow:
        future = self._futures.get(key)
        if future is None:
            future = self._futures[key] = self.runner.submit(lambda: self._run(row))
        return future

    def schedule_many(self, rows: list[tuple[str, GeoRow]]) -> None:
        """Schedule many rows with one hand-over to the runner's loop, or, for a large
        mock batch, to a forked helper process (offload.py)."""
        fresh = [(key, row) for key, row in rows if key not in self._futures]
        if can_offload(self.settings, self._custom_client, len(fresh)):
            offload = Offload([row for _, row in fresh], self.prompts, self.settings)
            self._offloads.append(offload)
            self._futures.update((key, handle) for (key, _), handle in zip(fresh, offload.submit()))
            return
        futures = self.runner.submit_many([functools.partial(self._run, row) for _, row in fresh])
        self._futures.update((key, future) for (key, _), future in zip(fresh, futures))

    def _run(self, row: GeoRow) -> Awaitable[GeoOutcome | RepeatedOutcome]:
        if self.settings.repeats > 1:
            return run_repeats(self.engine, row, self.settings.repeats, self.settings.seed)
        return self.engine.run(row)

    def outcome(self, key: str, row: GeoRow) -> GeoOutcome | RepeatedOutcome:
        """Wait for a row (scheduling it now if nobody did); the future is then dropped so
        finished rows do not pile up in memory."""
        future = self.schedule(key, row)
        try:
            return future.result()
        finally:
            self._futures.pop(key, None)

    def evaluate(self, rows: Iterable[GeoRow]) -> list[GeoOutcome]:
        keyed = [(f"{row.path}:{row.line}", row) for row in rows]
        self.schedule_many(keyed)
        outcomes = [self.outcome(key, row) for key, row in keyed]
        single = [o for o in outcomes if isinstance(o, GeoOutcome)]
        if len(single) != len(outcomes):
            raise ValueError("evaluate() gives one outcome per row: use it with repeats = 1")
        return single

    def usage_table(self) -> UsageTable:
        """Model usage per role, the helper's included. Read it after `close`."""
        total: UsageTable = {}
        for table in (self.usage.usage, *(o.usage for o in self._offloads)):
            merge_usage(total, table)
        return total

    def unschedule(self, keys: Iterable[str]) -> None:
        """Forget these rows, so scheduling one again starts it afresh, and cancel them (no
        further model calls). A row in the mock helper's chunk is only forgotten: it costs
        nothing, and cancelling it would cancel the rest of its chunk."""
        for key in keys:
            future = self._futures.pop(key, None)
            if isinstance(future, concurrent.futures.Future):
                future.cancel()

    def cancel_pending(self) -> int:
        return self.runner.cancel_pending() + sum(o.cancel_pending() for o in self._offloads)

    def close(self) -> None:
        for offload in self._offloads:
            offload.close()
        self.runner.close(self.client)
