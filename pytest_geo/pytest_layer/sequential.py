"""`--geo-sequential` in a pytest run: rows in the seeded order, scheduled a round at a
time, and skipped as "not needed" once their comparison is decided.

One process decides: the one that sees every record (the only process under `-n 0`,
the controller under xdist), with one Monitor (report/stopping.py) reading the pooled
paired differences in the seeded order, so the guarantee is the pooled test's. Under
xdist the workers learn the decision through a file in a temporary directory the
controller makes and names in each worker's `workerinput`: the controller rewrites
`decided.json` (node id -> why it is not needed) when a comparison is decided, and a
worker reads it (when its mtime moved) before each item. The workers write what
collection knows of each row (`plan-<worker>.json`), which the controller, collecting
nothing, needs to build the comparisons. Limit: a worker stops only at its next item,
and rows it had already scheduled ahead (lookahead.py) still run unless cancelled in
time, so under xdist a few more rows run than the test read; they are reported, scored
and counted as `rows_run`."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_geo.data.files import write_text_atomic
from pytest_geo.data.record import RowRecord
from pytest_geo.pytest_layer.items import GeoRowItem
from pytest_geo.pytest_layer.state import is_xdist_worker, results_of, running_session, settings_of
from pytest_geo.report.stopping import Monitor, PlannedRow, monitor_for, planned_row, run_order

if TYPE_CHECKING:
    from pytest_geo.engine.session import GeoSession

DIR_KEY = "geo_sequential_dir"  # workerinput key: the shared directory
DECIDED = "decided.json"
SEQUENTIAL: pytest.StashKey[SequentialRun] = pytest.StashKey()
ITEMS: pytest.StashKey[list[pytest.Item]] = pytest.StashKey()  # the session's items, for the rows to schedule


def check_sequential(config: pytest.Config) -> None:
    """--geo-sequential needs something to compare: a usage error at start otherwise."""
    settings = settings_of(config)
    if settings.margin is not None and not settings.sequential:
        raise pytest.UsageError("--geo-margin needs --geo-sequential")
    if settings.sequential and len(settings.variants) < 2 and not config.getoption("geo_baseline"):
        raise pytest.UsageError("--geo-sequential needs a paired comparison: two or more --geo-variant, "
                                "or --geo-baseline PATH")
    if settings.sequential:
        config.stash[SEQUENTIAL] = SequentialRun(config)


def sequential_run(config: pytest.Config) -> SequentialRun | None:
    return config.stash.get(SEQUENTIAL, None)


def _unit(item: GeoRowItem) -> str:
    return planned(item)["unit"]


def planned(item: GeoRowItem) -> PlannedRow:
    return planned_row(item.nodeid, item.suite_name, item.split, item.row.variant, len(item.row.candidates))


class SequentialRun:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.monitor: Monitor | None = None
        self.directory: Path | None = None
        self._seen_mtime = 0
        self._stopped: dict[str, str] = {}  # on a worker: what decided.json said
        self._items: dict[str, GeoRowItem] | None = None

    # Collection, on every process that collects.
    def order(self, items: list[pytest.Item]) -> None:
        """GEO rows in the seeded order (a row's variants stay together), after every
        other item; the same order on every xdist worker."""
        seed = settings_of(self.config).seed
        rows = [(i, item) for i, item in enumerate(items) if isinstance(item, GeoRowItem)]
        others = [item for item in items if not isinstance(item, GeoRowItem)]
        rows.sort(key=lambda pair: (run_order(seed, _unit(pair[1])), pair[0]))
        items[:] = others + [item for _, item in rows]

    def collected(self, items: list[pytest.Item]) -> None:
        plan = [planned(item) for item in items if isinstance(item, GeoRowItem)]
        if is_xdist_worker(self.config):
            directory = getattr(self.config, "workerinput", {}).get(DIR_KEY)
            if directory:
                self.directory = Path(directory)
                worker = getattr(self.config, "workerinput", {}).get("workerid", "gw")
                write_text_atomic(self.directory / f"plan-{worker}.json", json.dumps(plan), durable=False)
        elif plan:  # an xdist controller collects nothing: it reads a worker's plan (add)
            self._build(plan)

    def _build(self, plan: list[PlannedRow]) -> None:
        settings = settings_of(self.config)
        results = results_of(self.config)
        baseline = None
        if results.baseline is not None:
            baseline = {(r["suite"], r["nodeid"]): float(r["score"]) for r in results.baseline["rows"]
                        if r.get("error") is None}
        self.monitor = monitor_for(plan, settings, baseline)
        results.sequential = self.monitor

    # The deciding process (-n 0, or the xdist controller).
    def add(self, record: RowRecord) -> None:
        if self.monitor is None and self.directory is not None:  # the xdist controller: a worker's plan
            plans = sorted(self.directory.glob("plan-*.json"))
            if plans:
                self._build(json.loads(plans[0].read_text(encoding="utf-8")))
        if self.monitor is None:
            return
        decided = self.monitor.add(record)
        if decided is not None:
            results_of(self.config).not_needed.update(decided.not_needed)
            if self.directory is not None:
                write_text_atomic(self.directory / DECIDED, json.dumps(self.monitor.stopped), durable=False)

    def shared_directory(self) -> str:
        """The xdist controller's directory for the workers (made on first need)."""
        if self.directory is None:
            self.directory = Path(tempfile.mkdtemp(prefix="pytest-geo-sequential-"))
        return str(self.directory)

    # Before each item runs.
    def not_needed(self, item: pytest.Item) -> str | None:
        if self.monitor is not None:
            return self.monitor.stopped.get(item.nodeid)
        self._read_decisions()
        return self._stopped.get(item.nodeid)

    def _read_decisions(self) -> None:
        if self.directory is None:
            return
        try:
            mtime = (self.directory / DECIDED).stat().st_mtime_ns
        except FileNotFoundError:
            return
        if mtime != self._seen_mtime:
            self._seen_mtime = mtime
            self._stopped = json.loads((self.directory / DECIDED).read_text(encoding="utf-8"))
            geo = running_session(self.config)
            if geo is not None:
                self._cancel(geo)

    def _cancel(self, geo: GeoSession) -> None:
        """Rows scheduled ahead that are no longer needed: cancelled if not started."""
        for item in self.config.stash.get(ITEMS, []):
            if isinstance(item, GeoRowItem) and item.nodeid in self._stopped:
                geo.cancel(item.row)

    def before(self, item: GeoRowItem) -> None:
        """A row no longer needed is skipped (a skip mark: reported at the item's
        location, with the reason); under -n 0 a needed row's round is scheduled."""
        reason = self.not_needed(item)
        geo = running_session(self.config)
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=reason))
        elif geo is not None and not is_xdist_worker(self.config):
            self._schedule_round(item, geo)

    def in_comparison(self, item: GeoRowItem) -> bool:
        return self.monitor is not None and self.monitor.in_comparison(item.nodeid)

    def _schedule_round(self, item: GeoRowItem, geo: GeoSession) -> None:
        """When a round's first item comes, schedule that round's needed rows."""
        if self.monitor is None or geo.scheduled(item.row) is not None:
            return
        if self._items is None:
            self._items = {i.nodeid: i for i in self.config.stash.get(ITEMS, []) if isinstance(i, GeoRowItem)}
        items = self._items
        rows = [items[n].row for n in self.monitor.units_of_round(item.nodeid)
                if n in items and self.monitor.needed(n)]
        geo.schedule_many(rows)

    def close(self) -> None:
        if self.directory is not None and not is_xdist_worker(self.config):
            for path in self.directory.iterdir():
                path.unlink(missing_ok=True)
            os.rmdir(self.directory)


class SequentialXdistHooks:
    """Registered on an xdist controller under --geo-sequential: the shared directory."""

    def __init__(self, run: SequentialRun) -> None:
        self.run = run

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        workerinput = getattr(node, "workerinput", None)
        if isinstance(workerinput, dict):
            workerinput[DIR_KEY] = self.run.shared_directory()
