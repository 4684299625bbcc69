"""`--geo-limit N`, `--geo-sample N` and `--geo-shard K/N`: deselect the other rows of
each dataset the pytest way, so they are reported as deselected, never run and never
counted. A row's variants (`--geo-variant`) are kept or dropped together, so they stay
paired."""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from pytest_geo.data.sampling import chosen_indices
from pytest_geo.pytest_layer.items import EmptySplitItem, GeoItem
from pytest_geo.settings import Settings


def _dataset_of(item: GeoItem) -> tuple[str, str]:
    """Rows of one dataset: a dataset file's rows, or one split of a suite."""
    return (item.parent.nodeid if item.parent is not None else "", item.split)


def _row_name(item: GeoItem, variants: Iterable[str]) -> str:
    """The item's row name, without the `[variant]` a variant's item adds."""
    for variant in variants:
        if item.name.endswith(f"[{variant}]"):
            return item.name[: -len(variant) - 2]
    return item.name


def rows_to_deselect(items: Iterable[pytest.Item], settings: Settings) -> set[pytest.Item]:
    """The rows beyond the limit, outside the sample or the shard, per dataset. Rows
    already deselected (-k, -m) are gone by now: the limit counts the rows still selected."""
    if settings.limit is None and settings.sample is None and settings.shard is None:
        return set()
    datasets: dict[tuple[str, str], dict[str, list[GeoItem]]] = {}
    for item in items:
        if isinstance(item, GeoItem) and not isinstance(item, EmptySplitItem):
            rows = datasets.setdefault(_dataset_of(item), {})
            rows.setdefault(_row_name(item, settings.variants), []).append(item)
    dropped: set[pytest.Item] = set()
    for rows in datasets.values():
        names = list(rows)
        kept = set(chosen_indices(names, settings.limit, settings.sample, settings.seed, settings.shard))
        for i, name in enumerate(names):
            if i not in kept:
                dropped.update(rows[name])
    return dropped


def deselect_rows(config: pytest.Config, items: list[pytest.Item], settings: Settings) -> None:
    dropped = rows_to_deselect(items, settings)
    if dropped:
        config.hook.pytest_deselected(items=[item for item in items if item in dropped])
        items[:] = [item for item in items if item not in dropped]
