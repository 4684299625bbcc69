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


def resolve_min_scores(config: pytest.Config, given: Mapping[str, float], suites: Iterable[str],
                       judges: Iterable[str] = ()) -> dict[str, float]:
    """Map each given name to a suite: its name (a dataset suite's name is its path
    relative to the rootdir, as in node ids), or a dataset path as the user gives it,
    relative to the invocation directory or absolute. `SUITE@JUDGE` holds one of the
    `judges` to the limit (a suite alone, with judges, holds the panel). Unknown names are
    a usage error listing the suites (or the judges)."""
    names = sorted(set(suites))
    known_judges = list(judges)
    by_path = {(config.rootpath / name).resolve(): name for name in names if is_dataset_path(name)}
    resolved: dict[str, float] = {}
    unknown = []
    for given_key, value in given.items():
        whole = given_key in names or _dataset(config, by_path, given_key) is not None  # a path may hold '@'
        key, at, judge = given_key.rpartition("@") if "@" in given_key and not whole else (given_key, "", "")
        if at and judge not in known_judges:
            listed = ", ".join(known_judges) if known_judges else "no --geo-judge was given"
            raise pytest.UsageError(f"--geo-min-score: {given_key!r}: no judge named {judge!r} (judges: {listed})")
        if key in names:
            resolved[key + at + judge] = value
            continue
        found = _dataset(config, by_path, key)
        if found is None:
            unknown.append(given_key)
        else:
            resolved[found + at + judge] = value
    if unknown:
        listed = ", ".join(names) if names else "none were collected"
        raise pytest.UsageError(
            f"--geo-min-score: no selected suite named {', '.join(repr(k) for k in unknown)} (suites: {listed})"
        )
    return resolved


def _dataset(config: pytest.Config, by_path: Mapping[Path, str], key: str) -> str | None:
    """The dataset suite a path names, relative to the invocation directory or absolute."""
    path = Path(key)
    return by_path.get((path if path.is_absolute() else config.invocation_params.dir / path).resolve())
