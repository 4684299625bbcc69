"""What a row's JUnit XML test case carries (`--junitxml` reads the item's user properties)."""

from __future__ import annotations

from pytest_geo.data.record import RowRecord


def junit_properties(record: RowRecord) -> list[tuple[str, object]]:
    """Values become text there; an unset value an empty string."""
    names: tuple[str, ...]
    if record["kind"] == "geo":
        names = ("score", "rank_before", "rank_after", "rank_improvement", "feedback")
    elif record["kind"] == "suite":
        names = ("score", "feedback")
    else:
        return []
    values: dict[str, object] = dict(record)
    return [(name, "" if values.get(name) is None else values[name]) for name in names]
