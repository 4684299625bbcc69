"""`--geo-min-score SUITE=VALUE`: which collected suite each name means. Checked once the
suites are known (after collection; under xdist when the first worker has collected), so
a typo is a usage error instead of a gate that silently never runs."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

from pytest_geo.data.dataset import is_dataset_path

SPLIT_ITEM = re.compile(r"^(train|test)\[.*\]$")


def suite_of_nodeid(nodeid: str) -> str | None:
    """The suite a pytest-geo item's node id belongs to (an xdist controller only sees
    ids): `<file>::<suite>::<split>[...]` or `<dataset>.jsonl::<row>`; None otherwise."""
    parts = nodeid.split("::")
    if len(parts) >= 3 and SPLIT_ITEM.match(parts[-1]):
        return parts[-2]
    if len(parts) == 2 and is_dataset_path(parts[0]):
        return parts[0]
    return None


def resolve_min_scores(config: pytest.Config, given: Mapping[str, float], suites: Iterable[str]) -> dict[str, float]:
    """Map each given name to a suite: its name (a dataset suite's name is its path
    relative to the rootdir, as in node ids), or a dataset path as the user gives it,
    relative to the invocation directory or absolute. Unknown names are a usage error
    listing the suites."""
    names = sorted(set(suites))
    by_path = {(config.rootpath / name).resolve(): name for name in names if is_dataset_path(name)}
    resolved: dict[str, float] = {}
    unknown = []
    for key, value in given.items():
        if key in names:
            resolved[key] = value
            continue
        path = Path(key)
        found = by_path.get((path if path.is_absolute() else config.invocation_params.dir / path).resolve())
        if found is None:
            unknown.append(key)
        else:
            resolved[found] = value
    if unknown:
        listed = ", ".join(names) if names else "none were collected"
        raise pytest.UsageError(
            f"--geo-min-score: no selected suite named {', '.join(repr(k) for k in unknown)} (suites: {listed})"
        )
    return resolved
