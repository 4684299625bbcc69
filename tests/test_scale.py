"""The hot paths made cheaper for large datasets keep their exact behaviour."""

from __future__ import annotations

import asyncio
import copy
import functools
import json
import threading
import time

import pytest

from pytest_geo.data.dataset import Candidate, _plainly_valid, _validator
from pytest_geo.engine.experiment import candidate_values, candidates_json
from pytest_geo.engine.runner import Runner

GOOD = {
    "query": "q", "query_id": "r1", "target_id": "a",
    "candidates": [{"id": "a", "title": "A", "description": "x"}, {"id": "b", "title": "", "description": ""}],
}


def test_candidate_renderings_match_json_dumps() -> None:
    candidates = (Candidate("a", 'Q "x" \\ é 中', "line\nbreak\ttab \u2028 \x01"), Candidate("b", "", "</script>"))
    for chosen in (candidates, candidates[:1], ()):
        listed = [c.as_dict() for c in chosen]
        assert candidates_json(chosen) == json.dumps(listed, ensure_ascii=False, indent=2)
        assert candidate_values("q", None, chosen)["candidates_jsonl"] == "\n".join(
            json.dumps(c, ensure_ascii=False) for c in listed)


def _variants() -> list[object]:
    """The good row with one thing broken at a time (and some that stay valid)."""
    out: list[object] = [GOOD, [], "row", None]
    for key in ("query", "query_id", "id", "target_id", "candidates"):
        for bad in (None, "", 3, True, [], {}, "ok"):
            row = copy.deepcopy(GOOD)
            row[key] = bad
            out.append(row)
        row = copy.deepcopy(GOOD)
        row.pop(key, None)
        out.append(row)
    for field in ("id", "title", "description"):
        for bad in (None, "", 3, ["x"]):
            row = copy.deepcopy(GOOD)
            row["candidates"][0][field] = bad
            out.append(row)
        row = copy.deepcopy(GOOD)
        del row["candidates"][1][field]
        out.append(row)
    row = copy.deepcopy(GOOD)
    row["candidates"] = row["candidates"][:1]
    out += [row, {**GOOD, "candidates": [*GOOD["candidates"], "c"]}, {**GOOD, "extra": 1}]
    return out


@pytest.mark.parametrize("obj", _variants())
def test_fast_row_check_agrees_with_the_schema(obj: object) -> None:
    assert _plainly_valid(obj) == _validator().is_valid(obj)


def test_batched_submission_results_errors_and_cancellation() -> None:
    runner = Runner(concurrency=1)
    started: list[int] = []
    release = threading.Event()

    async def job(i: int) -> int:
        started.append(i)
        while not release.is_set():
            await asyncio.sleep(0.001)
        if i == 1:
            raise ValueError("row 1 failed")
        return i * 10

    try:
        futures = runner.submit_many([functools.partial(job, i) for i in range(5)])
        while not started:
            time.sleep(0.001)
        assert runner.cancel_pending() == 5  # nothing has finished yet
        assert all(f.cancelled() for f in futures)
        release.set()
        time.sleep(0.05)
        assert started == [0]  # the waiting rows never started
        again = runner.submit_many([functools.partial(job, i) for i in (1, 2)])
        with pytest.raises(ValueError, match="row 1 failed"):
            again[0].result(timeout=5)
        assert again[1].result(timeout=5) == 20
    finally:
        release.set()
        runner.close()
