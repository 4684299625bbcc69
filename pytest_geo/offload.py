"""Large mock runs use a second core: a forked helper process runs the rows' experiments
while pytest runs and reports the items in this one.

With the offline mock, a row's experiment is pure CPU (rendering, parsing, the fact
check): about as much per row as pytest's own per-item work, and a thread cannot overlap
it under the GIL. Forking hands the helper the rows for free (they are already in
memory); only the outcomes travel back, pickled, a chunk at a time.

Only where forking is safe: on Linux, with the built-in mock, and while this process
has no other thread (a fork copies locks other threads may hold). Otherwise, and for
runs under `MIN_ROWS`, the in-process runner does the work. The outcomes are the same
either way: the helper runs the same engine on the same rows.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import multiprocessing
import signal
import sys
import threading
from typing import Any, Sequence

from pytest_geo.data import GeoRow
from pytest_geo.geo import GeoEngine, GeoOutcome, RepeatedOutcome, one_line, run_repeats
from pytest_geo.llm.mock import MockClient
from pytest_geo.llm.usage import UsageClient, UsageTable, merge_usage
from pytest_geo.prompts import PromptSet
from pytest_geo.settings import Settings

MIN_ROWS = 100  # below this, forking costs more than it saves
# Small first chunks: the first item waits for the first chunk. Growing by 1.5x, not 2x:
# a row waits for its whole chunk, so a chunk must not take the helper longer than the
# previous one takes pytest to report (the helper needs about 0.6x pytest's time per row).
FIRST_CHUNK, GROWTH, MAX_CHUNK = 8, 1.5, 256

Outcome = GeoOutcome | RepeatedOutcome


def can_offload(settings: Settings, custom_client: bool, rows: int) -> bool:
    return (settings.mock and not custom_client and rows >= MIN_ROWS and sys.platform.startswith("linux")
            and threading.active_count() == 1)


# The helper's state: set by `_start_helper` in the forked child only.
_helper: dict[str, Any] = {}


def _start_helper(rows: Sequence[GeoRow], prompts: PromptSet, settings: Settings) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    usage = UsageClient(MockClient())
    _helper.update(
        rows=rows, settings=settings, usage=usage, loop=asyncio.new_event_loop(),
        engine=GeoEngine(prompts, usage, settings.models, settings.temperature, strict_facts=settings.strict_facts),
    )


def _run_chunk(start: int, stop: int) -> tuple[list[Outcome], UsageTable]:
    """Rows [start, stop) in order; returns their outcomes and the usage they added."""
    engine, settings, usage = _helper["engine"], _helper["settings"], _helper["usage"]

    async def run_all() -> list[Outcome]:
        outcomes: list[Outcome] = []
        for row in _helper["rows"][start:stop]:
            if settings.repeats > 1:
                outcomes.append(await run_repeats(engine, row, settings.repeats, settings.seed))
            else:
                outcomes.append(await engine.run(row))
        return outcomes

    usage.usage = {}
    return _helper["loop"].run_until_complete(run_all()), usage.usage


class OffloadedRow:
    """A row's place in a chunk: waits like a future, cancels with its chunk."""

    __slots__ = ("chunk", "index", "row")

    def __init__(self, chunk: concurrent.futures.Future[Any], index: int, row: GeoRow) -> None:
        self.chunk, self.index, self.row = chunk, index, row

    def result(self) -> Outcome:
        try:
            outcomes, _ = self.chunk.result()
        except concurrent.futures.CancelledError:
            raise
        except Exception as exc:  # the helper died (killed, out of memory): this row errors
            return GeoOutcome(self.row.query_id, self.row.target_id,
                              error=f"the mock helper process failed: {one_line(exc) or type(exc).__name__}")
        return outcomes[self.index]

    def cancel(self) -> bool:
        return self.chunk.cancel()


class Offload:
    """One forked helper for one batch of rows."""

    def __init__(self, rows: Sequence[GeoRow], prompts: PromptSet, settings: Settings) -> None:
        for stream in (sys.stdout, sys.stderr):  # else the child may flush a copy of buffered output
            stream.flush()
        # As the gc docs advise before a fork: frozen objects (the collected items, the
        # rows) are left out of later collections, so neither process's collector writes
        # to their pages (no copy-on-write) or rescans them. `close` unfreezes them
        # (unless someone else had frozen objects already: theirs to manage).
        self._froze = gc.get_freeze_count() == 0
        if self._froze:
            gc.freeze()
        self.usage: UsageTable = {}
        self.size = len(rows)
        self._lock = threading.Lock()
        # Chunks not yet done, for cancelling. A done chunk is dropped here, so its
        # outcomes live only until its rows have been handed out (OffloadedRow.chunk).
        self._chunks: dict[concurrent.futures.Future[Any], None] = {}
        self._executor = concurrent.futures.ProcessPoolExecutor(
            1, mp_context=multiprocessing.get_context("fork"), initializer=_start_helper,
            initargs=(rows, prompts, settings),
        )
        self._rows = rows

    def submit(self) -> list[OffloadedRow]:
        """Queue every row, in order, in chunks; one handle per row."""
        handles: list[OffloadedRow] = []
        rows, start, size = self._rows, 0, FIRST_CHUNK
        while start < len(rows):
            stop = min(len(rows), start + size)
            chunk = self._executor.submit(_run_chunk, start, stop)
            with self._lock:
                self._chunks[chunk] = None
            chunk.add_done_callback(self._finished)
            handles += [OffloadedRow(chunk, i, rows[start + i]) for i in range(stop - start)]
            start, size = stop, min(int(size * GROWTH), MAX_CHUNK)
        return handles

    def _finished(self, chunk: concurrent.futures.Future[Any]) -> None:
        with self._lock:
            self._chunks.pop(chunk, None)
            if not chunk.cancelled() and chunk.exception() is None:
                merge_usage(self.usage, chunk.result()[1])

    def cancel_pending(self) -> int:
        with self._lock:
            pending = list(reversed(self._chunks))
        return sum(1 for chunk in pending if chunk.cancel())

    def close(self) -> None:
        """Cancel what has not started; the running chunk (at most MAX_CHUNK rows) ends first."""
        self._executor.shutdown(wait=True, cancel_futures=True)
        if self._froze:
            self._froze = False
            gc.unfreeze()
