"""Collectors: GEO dataset files, YAML suite files, suites declared in test modules and
conftest files; each yields one item per row of the selected split."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from pytest_geo.data.dataset import (
    CollectedLine,
    DatasetError,
    RowProblem,
    iter_packed,
    packed_line,
    row_names,
)
from pytest_geo.data.egeo_data import dataset_split
from pytest_geo.data.record import GEO_METRIC
from pytest_geo.pytest_layer.items import (
    EmptySplitItem,
    GeoProblemItem,
    GeoRowItem,
    SuiteItem,
)
from pytest_geo.pytest_layer.state import DECLARED_SUITES, register_marker, settings_of
from pytest_geo.suites.suite import Metric, Suite, SuiteError, load_named_rows, suites_in
from pytest_geo.suites.suite_file import SuiteFileError, load_suite_file

_GEO_METRIC_ENTRY = Metric(GEO_METRIC, "", None)


def _geo_items(parent: pytest.Collector, lines: Sequence[CollectedLine], suite: str, split: str,
               threshold: float | None = None, name_format: str = "{}",
               row_threshold: float | None = None) -> Iterator[pytest.Item]:
    variants = list(settings_of(parent.config).variants)
    for name, line in zip(row_names(lines), lines, strict=True):
        node_name = name_format.format(name)
        if isinstance(line, RowProblem):  # one failure per malformed line, whatever the variants
            yield GeoProblemItem.from_parent(parent, name=node_name, problem=line, suite=suite, split=split,
                                             threshold=threshold)
        elif variants:
            # One item per variant, adjacent, so a row's variants run (and share rank_before)
            # together; each variant is its own suite `<suite>[<variant>]` for thresholds.
            for variant in variants:
                yield GeoRowItem.from_parent(parent, name=f"{node_name}[{variant}]", row=line._replace(variant=variant),
                                             suite=f"{suite}[{variant}]", split=split, threshold=threshold,
                                             row_threshold=row_threshold)
        else:
            yield GeoRowItem.from_parent(parent, name=node_name, row=line, suite=suite, split=split,
                                         threshold=threshold, row_threshold=row_threshold)


class GeoDatasetFile(pytest.File):
    """`--geo-dataset FILE`: shorthand for a suite over FILE scored by rank improvement.

    Inside the rootdir the node id is pytest's (relative to the rootdir). Outside it
    pytest names an argument file `""`, so every such dataset would be called `::q1` and
    share one suite; there the node id is the path relative to the invocation directory,
    or the absolute path when it is not below it."""

    @classmethod
    def for_path(cls, parent: pytest.Collector, path: Path) -> GeoDatasetFile:
        config = parent.config
        absolute = Path(os.path.abspath(path))
        if absolute.is_relative_to(config.rootpath):
            return cls.from_parent(parent, path=path)
        here = config.invocation_params.dir
        shown = absolute.relative_to(here).as_posix() if absolute.is_relative_to(here) else absolute.as_posix()
        return cls.from_parent(parent, path=path, nodeid=shown)

    def collect(self) -> Iterator[pytest.Item]:
        try:
            # packed as read: the file's parsed rows are never all in memory at once
            lines = list(iter_packed(self.path, settings_of(self.config).seed, display=self.nodeid))
        except DatasetError as exc:
            raise self.CollectError(str(exc)) from None
        self.add_marker("geo")  # on the file, not per item: its rows inherit it
        split = dataset_split(self.path)
        if not lines:
            # The suite rule: an empty dataset still reports (n=0, 0.0, "no examples").
            yield EmptySplitItem.from_parent(self, name="[no examples]", metric=_GEO_METRIC_ENTRY,
                                             suite=self.nodeid, split=split)
            return
        yield from _geo_items(self, lines, suite=self.nodeid, split=split)


class SuiteCollector(pytest.Collector):
    """One declared suite; its children are the rows of the selected split(s)."""

    def __init__(self, *, suite: Suite, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.suite = suite

    def collect(self) -> Iterator[pytest.Item]:
        settings = settings_of(self.config)
        where = self.parent.nodeid if self.parent is not None else ""
        declared = self.config.stash[DECLARED_SUITES].setdefault(self.suite.name, (self.suite, where))
        if declared[0] is not self.suite:
            # One name, one suite: results, thresholds and reports are keyed by it.
            raise self.CollectError(f"{where}: suite {self.suite.name!r} is already declared in {declared[1]}")
        try:
            metric = self.suite.check()
            splits = self.suite.splits(settings.split)
        except SuiteError as exc:
            raise self.CollectError(f"{where}: {exc}") from None
        for marker in (self.suite.name, *self.suite.markers):
            register_marker(self.config, marker)
            self.add_marker(marker)
        self.add_marker("geo")
        common: dict[str, Any] = {"suite": self.suite.name, "threshold": self.suite.threshold,
                                  "row_threshold": self.suite.row_threshold}
        if metric.dataset_free:  # Kedi's legacy form: no rows, the metric runs once
            yield SuiteItem.from_parent(self, name="once", metric=metric, split="train", index=0, value=None,
                                        expected=None, **common)
            return
        for split, spec in splits:
            try:
                named = load_named_rows(self.suite.name, metric.dataset, spec, self.suite.base_dir, settings.seed,
                                        geo=metric.is_geo)
            except SuiteError as exc:
                raise self.CollectError(f"{where}: {exc}") from None
            if not named:
                yield EmptySplitItem.from_parent(self, name=f"{split}[no examples]", metric=metric, split=split,
                                                 **common)
            elif metric.is_geo:
                yield from _geo_items(self, [packed_line(row) for _, row in named], split=split,
                                      name_format=split + "[{}]", **common)
            else:
                for index, (name, (value, expected)) in enumerate(named):
                    yield SuiteItem.from_parent(self, name=f"{split}[{name}]", metric=metric, split=split,
                                                index=index, value=value, expected=expected, **common)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        if excinfo.errisinstance(self.CollectError):
            return str(excinfo.value.args[0])
        return super().repr_failure(excinfo)


def split_note(config: pytest.Config) -> str:
    """For the header: under --geo-split test (the default) a suite with test_data never
    runs its data rows, which surprises who wrote both."""
    if settings_of(config).split != "test":
        return ""
    held_out = sorted(name for name, (suite, _) in config.stash.get(DECLARED_SUITES, {}).items()
                      if suite.metrics and suite.metrics[0].dataset in suite.test_data)
    if not held_out:
        return ""
    return (f"; split test: the test_data of {', '.join(held_out)} (their data rows run with "
            "--geo-split train or all)")


_SUITES_SEEN = pytest.StashKey[set[int]]()


def suite_collector(parent: pytest.Collector, suite: Suite) -> SuiteCollector | None:
    """A module's suite, once: `alias = s` binds one suite to a second name, and pytest
    offers each name (collecting both would run every row twice under one node id)."""
    seen = parent.stash.setdefault(_SUITES_SEEN, set())
    if id(suite) in seen:
        return None
    seen.add(id(suite))
    return SuiteCollector.from_parent(parent, name=suite.name, suite=suite)


def project_roots(config: pytest.Config) -> list[Path]:
    """Where a YAML suite's functions may come from: the rootdir and the pythonpath ini entries."""
    return [config.rootpath, *(Path(p) for p in config.getini("pythonpath"))]


class SuiteFile(pytest.File):
    """A YAML suite file (`*.geo.yaml` by default)."""

    def collect(self) -> Iterator[pytest.Collector]:
        try:
            suite = load_suite_file(self.path, self.nodeid, project_roots(self.config))
        except SuiteFileError as exc:
            raise self.CollectError(str(exc)) from None
        yield SuiteCollector.from_parent(self, name=suite.name, suite=suite)


class ConftestSuites(pytest.File):
    """Suites declared in a conftest.py, which pytest imports but never collects."""

    def collect(self) -> Iterator[pytest.Collector]:
        module = self.config.pluginmanager.get_plugin(str(self.path))
        for suite in suites_in(module):
            yield SuiteCollector.from_parent(self, name=suite.name, suite=suite)
