"""Collectors and items: each GEO dataset line and each suite row becomes one pytest item."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

import pytest

from pytest_geo.data import DatasetError, GeoRow, RowProblem, iter_dataset, row_names
from pytest_geo.procedures import running_with
from pytest_geo.scoring import Score, shorten_repr
from pytest_geo.suite_files import SuiteFileError, load_suite_file
from pytest_geo.suites import GEO_METRIC, Metric, Suite, SuiteError, load_rows, score_metric, suites_in

if TYPE_CHECKING:
    from pytest_geo.geo import GeoOutcome, RepeatedOutcome


class GeoRowFailure(Exception):
    """An expected failure kind: reported as its one-line message, no traceback."""


def _register_marker(config: pytest.Config, name: str) -> None:
    """Suite names and declared markers are registered, so --strict-markers stays clean."""
    if name not in config.stash[REGISTERED_MARKERS]:
        config.stash[REGISTERED_MARKERS].add(name)
        config.addinivalue_line("markers", f"{name}: pytest-geo eval suite marker")


REGISTERED_MARKERS = pytest.StashKey["set[str]"]()


def _geo_items(
    parent: pytest.Collector, lines: list[Any], suite: str, split: str, name_format: str = "{}"
) -> Iterator[pytest.Item]:
    for name, line in zip(row_names(lines), lines):
        node_name = name_format.format(name)
        if isinstance(line, RowProblem):
            yield GeoProblemItem.from_parent(parent, name=node_name, problem=line, suite=suite, split=split)
        else:
            yield GeoRowItem.from_parent(parent, name=node_name, row=line, suite=suite, split=split)


class GeoDatasetFile(pytest.File):
    """`--geo-dataset FILE`: shorthand for a suite over FILE scored by rank improvement."""

    def collect(self) -> Iterator[pytest.Item]:
        from pytest_geo.plugin import settings_of

        try:
            lines = list(iter_dataset(self.path, settings_of(self.config).seed, display=self.nodeid))
        except DatasetError as exc:
            raise self.CollectError(str(exc)) from None
        self.add_marker("geo")  # on the file, not per item: its rows inherit it (see _GeoItem)
        yield from _geo_items(self, lines, suite=self.nodeid, split="train")


class SuiteCollector(pytest.Collector):
    """One declared suite; its children are the rows of the selected split(s)."""

    def __init__(self, *, suite: Suite, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.suite = suite

    def collect(self) -> Iterator[pytest.Item]:
        from pytest_geo.plugin import settings_of

        settings = settings_of(self.config)
        where = self.parent.nodeid if self.parent is not None else ""
        try:
            metric = self.suite.check()
            splits = self.suite.splits(settings.split)
        except SuiteError as exc:
            raise self.CollectError(f"{where}: {exc}") from None
        for marker in (self.suite.name, *self.suite.markers):
            _register_marker(self.config, marker)
            self.add_marker(marker)
        self.add_marker("geo")
        for split, spec in splits:
            try:
                rows = load_rows(self.suite.name, metric.dataset, spec, self.suite.base_dir, settings.seed,
                                 geo=metric.is_geo)
            except SuiteError as exc:
                raise self.CollectError(f"{where}: {exc}") from None
            if not rows:
                yield EmptySplitItem.from_parent(
                    self, name=f"{split}[no examples]", metric=metric, suite=self.suite.name, split=split
                )
            elif metric.is_geo:
                yield from _geo_items(self, rows, suite=self.suite.name, split=split, name_format=split + "[{}]")
            else:
                for index, (value, expected) in enumerate(rows):
                    yield SuiteItem.from_parent(
                        self, name=f"{split}[{index}]", metric=metric, suite=self.suite.name, split=split, index=index,
                        value=value, expected=expected,
                    )

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        if excinfo.errisinstance(self.CollectError):
            return str(excinfo.value.args[0])
        return super().repr_failure(excinfo)


class SuiteFile(pytest.File):
    """A YAML suite file (`*.geo.yaml` by default)."""

    def collect(self) -> Iterator[pytest.Collector]:
        try:
            suite = load_suite_file(self.path, self.nodeid)
        except SuiteFileError as exc:
            raise self.CollectError(str(exc)) from None
        yield SuiteCollector.from_parent(self, name=suite.name, suite=suite)


class ConftestSuites(pytest.File):
    """Suites declared in a conftest.py, which pytest imports but never collects."""

    def collect(self) -> Iterator[pytest.Collector]:
        module = self.config.pluginmanager.get_plugin(str(self.path))
        for suite in suites_in(module):
            yield SuiteCollector.from_parent(self, name=suite.name, suite=suite)


class _GeoItem(pytest.Item):
    """A row. Its markers (`geo`, the suite's name and declared markers) sit on the
    parent collector, which `-m`, `iter_markers` and `get_closest_marker` all consult:
    one marker per item cost ~10% of a 10,000-row run."""

    line: int
    geo_record: dict[str, Any] | None = None

    def __init__(self, *, suite: str, split: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.suite_name = suite
        self.split = split

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        if excinfo.errisinstance(GeoRowFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, getattr(self, "line", 1) - 1, self.name

    def _base_record(self, kind: str, metric: str) -> dict[str, Any]:
        """Plain data only: records travel with reports to an xdist controller."""
        threshold = self.parent.suite.threshold if isinstance(self.parent, SuiteCollector) else None
        return {"kind": kind, "suite": self.suite_name, "metric": metric, "split": self.split,
                "nodeid": self.nodeid, "line": getattr(self, "line", 0), "threshold": threshold}


class GeoRowItem(_GeoItem):
    def __init__(self, *, row: GeoRow, **kwargs: Any) -> None:
        self.row = row
        self.line = row.line
        super().__init__(**kwargs)

    def runtest(self) -> None:
        from pytest_geo.plugin import geo_session_of

        outcome: GeoOutcome | RepeatedOutcome = geo_session_of(self.config).outcome(self.nodeid, self.row)
        self.geo_record = {**self._base_record("geo", GEO_METRIC), "dataset": self.row.path, **outcome.record(),
                           "target_was_chosen": self.row.target_was_chosen}
        if outcome.error is not None:
            raise GeoRowFailure(f"{self.row.path}:{self.row.line}: error: {outcome.error}")


class GeoProblemItem(_GeoItem):
    def __init__(self, *, problem: RowProblem, **kwargs: Any) -> None:
        self.problem = problem
        self.line = problem.line
        super().__init__(**kwargs)

    def runtest(self) -> None:
        self.geo_record = {**self._base_record("problem", GEO_METRIC), "dataset": self.problem.path,
                           "problem": self.problem.problem}
        raise GeoRowFailure(str(self.problem))


class SuiteItem(_GeoItem):
    """One (input, expected) row scored by the suite's metric."""

    def __init__(self, *, metric: Metric, index: int, value: Any, expected: Any, **kwargs: Any) -> None:
        self.metric = metric
        self.index = index
        self.value = value
        self.expected = expected
        super().__init__(**kwargs)

    def runtest(self) -> None:
        score = self._score()
        self.geo_record = {**self._base_record("suite", self.metric.name), "index": self.index,
                           "input": shorten_repr(self.value, 200), "score": score.value,
                           "feedback": score.feedback,
                           "error": score.feedback.removeprefix("error: ") if score.error else None}
        if score.error:
            raise GeoRowFailure(f"{self.suite_name}::{self.metric.name} {self.split}[{self.index}]: {score.feedback}")

    def _score(self) -> Score:
        from pytest_geo.plugin import geo_session_of

        with running_with(lambda: geo_session_of(self.config)):
            return score_metric(self.metric, self.value, self.expected)


class EmptySplitItem(_GeoItem):
    """Stands for a selected dataset with no rows, so the suite still reports 0.0."""

    def __init__(self, *, metric: Metric, **kwargs: Any) -> None:
        self.metric = metric
        super().__init__(**kwargs)

    def runtest(self) -> None:
        self.geo_record = {**self._base_record("empty", self.metric.name)}
