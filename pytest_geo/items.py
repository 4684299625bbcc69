"""Collectors and items: each GEO dataset line becomes one pytest item."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest

from pytest_geo.data import DatasetError, GeoRow, RowProblem, iter_dataset, row_names
from pytest_geo.geo import GeoOutcome


class GeoRowFailure(Exception):
    """An expected failure kind: reported as its one-line message, no traceback."""


class GeoDatasetFile(pytest.File):
    def collect(self) -> Iterator[pytest.Item]:
        from pytest_geo.plugin import settings_of

        try:
            lines = list(iter_dataset(self.path, settings_of(self.config).seed, display=self.nodeid))
        except DatasetError as exc:
            raise self.CollectError(str(exc)) from None
        for name, line in zip(row_names(lines), lines):
            if isinstance(line, RowProblem):
                yield GeoProblemItem.from_parent(self, name=name, problem=line)
            else:
                yield GeoRowItem.from_parent(self, name=name, row=line)


class _GeoItem(pytest.Item):
    line: int
    geo_record: dict[str, Any] | None = None

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        if excinfo.errisinstance(GeoRowFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, self.line - 1, self.name

    def _base_record(self, kind: str) -> dict[str, Any]:
        return {"kind": kind, "dataset": self.parent.nodeid if self.parent else "", "nodeid": self.nodeid,
                "line": self.line}


class GeoRowItem(_GeoItem):
    def __init__(self, *, row: GeoRow, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.row = row
        self.line = row.line
        self.add_marker("geo")

    def runtest(self) -> None:
        from pytest_geo.plugin import geo_session_of

        outcome: GeoOutcome = geo_session_of(self.config).outcome(self.nodeid, self.row)
        self.geo_record = {**self._base_record("row"), **outcome.record(),
                           "target_was_chosen": self.row.target_was_chosen}
        if outcome.error is not None:
            raise GeoRowFailure(f"{self.row.path}:{self.row.line}: error: {outcome.error}")


class GeoProblemItem(_GeoItem):
    def __init__(self, *, problem: RowProblem, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.problem = problem
        self.line = problem.line
        self.add_marker("geo")

    def runtest(self) -> None:
        self.geo_record = {**self._base_record("problem"), "problem": self.problem.problem}
        raise GeoRowFailure(str(self.problem))
