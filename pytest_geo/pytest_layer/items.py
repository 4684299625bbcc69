"""The items: each GEO dataset line and each suite row is one pytest item, which runs its
row, records the result on itself and fails with a one-line message when the row errs."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from pytest_geo.data.dataset import GeoRow, PackedRow, RowProblem
from pytest_geo.data.record import (
    RowRecord,
    geo_record,
    problem_record,
    suite_record,
    where,
)
from pytest_geo.pytest_layer.budget import budget_reached
from pytest_geo.pytest_layer.state import MAX_ERROR_RATE, geo_session_of
from pytest_geo.scoring import Score, shorten_repr
from pytest_geo.suites.procedures import running_with
from pytest_geo.suites.suite import Metric, score_metric
from pytest_geo.text import printable

_PACKAGE = Path(__file__).resolve().parent.parent


class GeoRowFailure(Exception):
    """An expected failure kind: reported as its one-line message, no traceback."""


class MetricRaised(Exception):
    """A metric raised: reported by the traceback of what it raised (its `__cause__`),
    as pytest reports a failing test."""


class GeoItem(pytest.Item):
    """A row. Its markers (`geo`, the suite's name and declared markers) sit on the
    parent collector, which `-m`, `iter_markers` and `get_closest_marker` all consult.
    Its own attributes are slots: a run holds every item to its end, and pytest's
    instance dict of a node grows to several times its size with them in it."""

    __slots__ = ("suite_name", "split", "threshold", "row_threshold", "line", "geo_record", "geo_stopped")

    def __init__(self, *, suite: str, split: str, threshold: float | None = None,
                 row_threshold: float | None = None, line: int = 0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.suite_name = suite
        self.split = split
        self.threshold = threshold
        self.row_threshold = row_threshold
        self.line = line
        self.geo_record: RowRecord | None = None
        self.geo_stopped: str | None = None  # why the model server stopped being called, on the row that saw it

    def row_error(self, message: str, raised: BaseException | None = None) -> None:
        """An errored row fails its item; with --geo-max-error-rate the error is tolerated
        here (xfailed, with the message) and judged per suite at the end of the run."""
        limit = self.config.stash.get(MAX_ERROR_RATE, None)
        if limit is not None:
            pytest.xfail(f"{message} (tolerated by --geo-max-error-rate {limit:g})")
        if raised is not None:
            raise MetricRaised(message) from raised
        raise GeoRowFailure(message)

    def check_row_threshold(self, label: str, score: float) -> None:
        """A suite's `row_threshold`: a row scoring below it fails its item."""
        if self.row_threshold is not None and score < self.row_threshold:
            raise GeoRowFailure(f"{label}: scored {score:.4f}, below the suite's row_threshold "
                                f"{self.row_threshold:g}")

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        if excinfo.errisinstance(GeoRowFailure):
            return printable(str(excinfo.value))  # model and dataset text: no escapes reach the terminal
        cause = excinfo.value.__cause__
        if excinfo.errisinstance(MetricRaised) and cause is not None:
            return self._metric_traceback(pytest.ExceptionInfo.from_exception(cause), style)
        return super().repr_failure(excinfo, style=style)

    def _metric_traceback(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any) -> Any:
        """The metric's frames (the plugin's own cut, as pytest cuts its own from a test's),
        in the style --tb asks for, with --showlocals' locals."""
        option = self.config.option
        if not option.fulltrace:
            frames = excinfo.traceback
            for start, entry in enumerate(frames):
                if not Path(str(entry.path)).is_relative_to(_PACKAGE):
                    excinfo.traceback = frames[start:]
                    break
        tbstyle = style or option.tbstyle
        return excinfo.getrepr(
            style="long" if tbstyle in (None, "auto") else tbstyle, showlocals=option.showlocals,
            funcargs=True, truncate_locals=option.verbose <= 1,
        )

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, max(self.line - 1, 0), self.name

    def _where(self, kind: Any, metric: str) -> RowRecord:
        return where(kind, suite=self.suite_name, metric=metric, split=self.split, nodeid=self.nodeid,
                     line=self.line, threshold=self.threshold)


class GeoRowItem(GeoItem):
    """A GEO row. It keeps the row packed (`PackedRow`) and holds it parsed only from
    when it is scheduled (lookahead.py) until it has run."""

    __slots__ = ("_row", "_packed")

    def __init__(self, *, row: PackedRow, **kwargs: Any) -> None:
        self._row: GeoRow | None = None
        self._packed = row
        super().__init__(line=row.line, **kwargs)

    @property
    def row(self) -> GeoRow:
        """The row, parsed back on first use and kept until the item has run (an item
        run again, by a rerun plugin, reads it back again)."""
        if self._row is None:
            self._row = self._packed.row()
        return self._row

    def read_row(self) -> GeoRow:
        """The row parsed afresh and not kept: a check over every row at collection
        must not hold them all parsed until each runs."""
        return self._packed.row()

    @property
    def row_not_run(self) -> GeoRow | None:
        """The row if it was read (scheduled, waited for) and the item ended without
        running it (skipped, setup failed): the session may still hold it scheduled.
        None once run."""
        return self._row

    def forget_row(self) -> None:
        """Back to the packed row only (after it ran, or was cancelled unrun)."""
        self._row = None

    def runtest(self) -> None:
        row = self.row
        try:
            self._run(row)
        finally:
            self.forget_row()

    def _run(self, row: GeoRow) -> None:
        geo = geo_session_of(self.config)
        outcome = geo.outcome(row)
        if outcome.not_run:
            # One failure for the whole run (the model_server or budget gate), not one per row.
            self.geo_stopped = geo.stopped
            pytest.skip(f"not run: {geo.stopped or outcome.error}")
        self.geo_record = geo_record(row, outcome.record(), suite=self.suite_name, split=self.split,
                                     nodeid=self.nodeid, threshold=self.threshold)
        if outcome.error is not None:
            self.row_error(f"{row.path}:{row.line}: error: {outcome.error}")
        self.check_row_threshold(f"{row.path}:{row.line}", self.geo_record.get("score", 0.0))


class GeoProblemItem(GeoItem):
    __slots__ = ("problem",)

    def __init__(self, *, problem: RowProblem, **kwargs: Any) -> None:
        self.problem = problem
        super().__init__(line=problem.line, **kwargs)

    def runtest(self) -> None:
        self.geo_record = problem_record(self.problem, suite=self.suite_name, split=self.split,
                                         nodeid=self.nodeid, threshold=self.threshold)
        raise GeoRowFailure(str(self.problem))


class SuiteItem(GeoItem):
    """One (input, expected) row scored by the suite's metric."""

    __slots__ = ("metric", "index", "value", "expected")

    def __init__(self, *, metric: Metric, index: int, value: Any, expected: Any, **kwargs: Any) -> None:
        self.metric = metric
        self.index = index
        self.value = value
        self.expected = expected
        super().__init__(**kwargs)

    def runtest(self) -> None:
        started = time.perf_counter()
        score = self._score()
        seconds = round(time.perf_counter() - started, 3)
        reached = budget_reached(self.config) if score.error else None
        if reached is not None:  # its model call was not sent: the budget gate fails once for the run
            pytest.skip(f"not run: {reached}")
        self.geo_record = suite_record(
            self._where("suite", self.metric.name), self.index, shorten_repr(self.value, 200), score.value,
            score.feedback, score.feedback.removeprefix("error: ") if score.error else None,
        )
        self.geo_record["seconds"] = seconds
        if score.error:
            self.row_error(f"{self.suite_name}::{self.metric.name} {self.name}: {score.feedback}", score.raised)
        self.check_row_threshold(f"{self.suite_name}::{self.metric.name} {self.name}", score.value)

    def _score(self) -> Score:
        with running_with(lambda: geo_session_of(self.config)):
            return score_metric(self.metric, self.value, self.expected)


class EmptySplitItem(GeoItem):
    """Stands for a selected dataset with no rows, so the suite still reports 0.0."""

    __slots__ = ("metric",)

    def __init__(self, *, metric: Metric, **kwargs: Any) -> None:
        self.metric = metric
        super().__init__(**kwargs)

    def runtest(self) -> None:
        self.geo_record = self._where("empty", self.metric.name)
