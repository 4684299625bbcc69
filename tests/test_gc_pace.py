"""The collector's pace while rows run (engine/gc_pace.py): raised while a runner is open,
put back when the last one closes, and a threshold someone else set is left alone."""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator

import pytest

from pytest_geo.engine import gc_pace
from pytest_geo.engine.runner import Runner


@pytest.fixture(autouse=True)
def default_threshold() -> Iterator[None]:
    saved = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield
    gc.set_threshold(*saved)


@pytest.mark.unit
def test_raised_while_a_runner_is_open_and_put_back_when_the_last_closes() -> None:
    first, second = Runner(2), Runner(2)
    assert gc.get_threshold() == (10_000, 10, 10)
    first.close()
    assert gc.get_threshold() == (10_000, 10, 10)  # the second still runs rows
    second.close()
    assert gc.get_threshold() == (700, 10, 10)
    second.close()  # closing twice releases once
    assert gc.get_threshold() == (700, 10, 10)


@pytest.mark.unit
def test_a_threshold_changed_meanwhile_is_left_as_it_was_set() -> None:
    runner = Runner(2)
    gc.set_threshold(2_000, 5, 5)
    runner.close()
    assert gc.get_threshold() == (2_000, 5, 5)


@pytest.mark.unit
@pytest.mark.parametrize("threshold", [(50_000, 10, 10), (0, 10, 10)])
def test_a_slower_pace_or_a_collector_switched_off_is_not_touched(threshold: tuple[int, int, int]) -> None:
    gc.set_threshold(*threshold)
    gc_pace.hold()
    assert gc.get_threshold() == threshold
    gc_pace.release()
    assert gc.get_threshold() == threshold


ROWS_AND_A_TEST = {
    "test_pace.py": """
import gc, json, pathlib

def test_sees_the_pace():
    pathlib.Path("during.json").write_text(json.dumps(gc.get_threshold()))
""",
}


@pytest.mark.plugin
def test_a_pytest_run_with_rows_raises_it_for_the_run_and_restores_it(geo_project: pytest.Pytester) -> None:
    geo_project.makepyfile(**ROWS_AND_A_TEST)
    result = geo_project.runpytest("data/smoke.jsonl", "test_pace.py", "--geo-mock", "-p", "no:xdist")
    result.assert_outcomes(passed=9)
    assert json.loads((geo_project.path / "during.json").read_text()) == [10_000, 10, 10]
    assert gc.get_threshold() == (700, 10, 10)


@pytest.mark.plugin
def test_a_pytest_run_without_rows_leaves_it_alone(geo_project: pytest.Pytester) -> None:
    geo_project.makepyfile(**ROWS_AND_A_TEST)
    geo_project.runpytest("test_pace.py", "--geo-mock", "-p", "no:xdist").assert_outcomes(passed=1)
    assert json.loads((geo_project.path / "during.json").read_text()) == [700, 10, 10]
