"""What a row's JUnit XML test case carries (`--junitxml` reads the item's user properties)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_geo.data.record import RowRecord

if TYPE_CHECKING:
    import pytest

WORKER_INPUT = "geo_junitxml"  # workerinput key: whether the controller writes a JUnit XML file
GEO_PROPERTIES: tuple[str, ...] = ("score", "rank_before", "rank_after", "rank_improvement", "feedback")
SUITE_PROPERTIES = ("score", "feedback")


def writes_junit(config: pytest.Config) -> bool:
    """Whether this run's JUnit XML file is written, so rows need their properties. An
    xdist worker writes none itself: its reports carry the properties to the controller,
    which says whether it writes one (`pass_junit`); a worker not told reads its options."""
    told = getattr(config, "workerinput", {}).get(WORKER_INPUT)
    if told is not None:
        return bool(told)
    return bool(getattr(config.option, "xmlpath", None))  # the option is gone under -p no:junitxml


def pass_junit(config: pytest.Config, workerinput: dict[str, object]) -> None:
    """On the controller, for each worker it starts (pytest_configure_node)."""
    workerinput[WORKER_INPUT] = writes_junit(config)


def junit_properties(record: RowRecord) -> list[tuple[str, object]]:
    """Values become text there; an unset value an empty string."""
    kind = record["kind"]
    if kind == "geo":
        names = GEO_PROPERTIES
    elif kind == "suite":
        names = SUITE_PROPERTIES
    else:
        return []
    return [(name, "" if (value := record.get(name)) is None else value) for name in names]
