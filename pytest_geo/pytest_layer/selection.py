"""`--geo-limit N` and `--geo-sample N`: deselect the other rows of each dataset the
pytest way, so they are reported as deselected, never run and never counted."""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from pytest_geo.data.sampling import chosen_indices
from pytest_geo.pytest_layer.items import EmptySplitItem, GeoItem
from pytest_geo.settings import Settings


def _dataset_of(item: GeoItem) -> tuple[str, str]:
    """Rows of one dataset: a dataset file's rows, or one split of a suite."""
    return (item.parent.nodeid if item.parent is not None else "", item.split)


def rows_to_deselect(items: Iterable[pytest.Item], settings: Settings) -> set[pytest.Item]:
    """The rows beyond the limit or outside the sample, per dataset. Rows already
    deselected (-k, -m) are gone by now: the limit counts the rows still selected."""
    if settings.limit is None and settings.sample is None:
        return set()
    datasets: dict[tuple[str, str], list[GeoItem]] = {}
    for item in items:
        if isinstance(item, GeoItem) and not isinstance(item, EmptySplitItem):
            datasets.setdefault(_dataset_of(item), []).append(item)
    dropped: set[pytest.Item] = set()
    for rows in datasets.values():
        kept = chosen_indices([row.name for row in rows], settings.limit, settings.sample, settings.seed)
        dropped.update(rows[i] for i in set(range(len(rows))) - set(kept))
    return dropped


def deselect_rows(config: pytest.Config, items: list[pytest.Item], settings: Settings) -> None:
    dropped = rows_to_deselect(items, settings)
    if dropped:
        config.hook.pytest_deselected(items=[item for item in items if item in dropped])
        items[:] = [item for item in items if item not in dropped]
