"""Aggregate arithmetic against hand-computed cases, and metric-return normalisation."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import pytest

from pytest_geo.data.dataset import Candidate, GeoRow
from pytest_geo.engine.experiment import GeoEngine, candidate_values
from pytest_geo.engine.prompts import load_prompts
from pytest_geo.llm.base import ChatRequest, ChatResponse, ModelError
from pytest_geo.llm.mock import MockClient
from pytest_geo.scoring import MetricReturnError, Score, normalize, summarize
from pytest_geo.templates import render

pytestmark = pytest.mark.unit


def test_empty() -> None:
    s = summarize([])
    assert (s.n, s.mean, s.win_rate, s.stderr) == (0, 0.0, 0.0, 0.0)


def test_one_value_has_no_stderr() -> None:
    s = summarize([3])
    assert (s.n, s.mean, s.win_rate, s.stderr) == (1, 3.0, 1.0, 0.0)


def test_two_values() -> None:
    s = summarize([2, 0])
    # mean 1; sample variance ((1)^2 + (-1)^2) / 1 = 2; stderr sqrt(2)/sqrt(2) = 1
    assert (s.n, s.mean, s.win_rate) == (2, 1.0, 0.5)
    assert s.stderr == pytest.approx(1.0)


def test_mixed_case() -> None:
    s = summarize([2, -1, 0, 0, 1])
    # mean 0.4; deviations 1.6, -1.4, -0.4, -0.4, 0.6; squares sum 5.2; var 1.3
    assert s.mean == pytest.approx(0.4)
    assert s.win_rate == pytest.approx(0.4)
    assert s.stderr == pytest.approx(math.sqrt(1.3) / math.sqrt(5))


def test_geo_names() -> None:
    assert summarize([2, 2]).as_geo() == {
        "n": 2, "avg_rank_improvement": 2.0, "win_rate": 1.0, "stderr_rank_improvement": 0.0,
    }


@pytest.mark.parametrize(
    ("returned", "expected"),
    [
        (True, Score(1.0)),
        (False, Score(0.0)),
        (3, Score(3.0)),
        (2.5, Score(2.5)),
        (-4.0, Score(-4.0)),
        ((0.5, "close"), Score(0.5, "close")),
        ((True, 42), Score(1.0, "42")),
    ],
)
def test_normalize(returned: object, expected: Score) -> None:
    assert normalize(returned) == expected


@pytest.mark.parametrize("returned", [None, "yes", [1], (1, 2, 3), ("a", "b")])
def test_normalize_rejects_other_values(returned: object) -> None:
    with pytest.raises(MetricReturnError, match="expected a bool, a number or \\(score, feedback\\)"):
        normalize(returned)


def test_error_score() -> None:
    assert Score.from_error(ValueError("boom")) == Score(0.0, "error: boom", True)


def test_a_failed_ranking_cancels_the_rows_rewrite() -> None:
    """rank_before and the rewrite run together; when the ranking fails for good, the
    rewrite still waiting on the model is cancelled, not left sending calls for a row
    that has already failed."""
    from conftest import PROMPTS

    events: list[str] = []

    class RankerDown:
        async def complete(self, request: ChatRequest) -> ChatResponse:
            if request.role == "ranker":
                await asyncio.sleep(0)
                raise ModelError("ranker down")
            try:
                await asyncio.Event().wait()  # a rewrite that never answers
            except asyncio.CancelledError:
                events.append("rewrite cancelled")
                raise
            raise AssertionError("unreachable")

        async def aclose(self) -> None:
            pass

    row = GeoRow("d.jsonl", 1, "red kettle", (Candidate("a", "A", "a"), Candidate("b", "B", "b")), "b", "q1")
    engine = GeoEngine(load_prompts(PROMPTS), RankerDown(), {"ranker": "m", "rewriter": "m"})

    async def run() -> tuple[str | None, list[str]]:
        outcome = await asyncio.wait_for(engine.run(row), timeout=10)
        return outcome.error, list(events)  # seen as the row ends, before the loop closes

    assert asyncio.run(run()) == ("ranker down", ["rewrite cancelled"])


class _Stalling:
    """A client whose `failing` role fails after a step and whose other role never
    answers, recording the cancellation of the one that hangs."""

    def __init__(self, failing: set[str], events: list[str]) -> None:
        self.failing = failing
        self.events = events

    async def complete(self, request: ChatRequest) -> ChatResponse:
        role = request.role
        if role in self.failing:
            await asyncio.sleep(0)
            raise ModelError(f"{role} down")
        try:
            await asyncio.Event().wait()  # never answers
        except asyncio.CancelledError:
            self.events.append(f"{role} cancelled")
            raise
        raise AssertionError("unreachable")

    async def aclose(self) -> None:
        pass


def _stalling_engine(failing: set[str], events: list[str]) -> tuple[GeoEngine, GeoRow]:
    from conftest import PROMPTS

    row = GeoRow("d.jsonl", 1, "red kettle", (Candidate("a", "A", "a"), Candidate("b", "B", "b")), "b", "q1")
    return GeoEngine(load_prompts(PROMPTS), _Stalling(failing, events), {"ranker": "m", "rewriter": "m"}), row


def test_a_failed_rewrite_cancels_the_rows_ranking() -> None:
    """The other way round: the rewrite fails for good while rank_before waits on the
    model; the ranking is cancelled and the rewrite's error is the row's."""
    events: list[str] = []
    engine, row = _stalling_engine({"rewriter"}, events)

    async def run() -> tuple[str | None, list[str]]:
        outcome = await asyncio.wait_for(engine.run(row), timeout=10)
        return outcome.error, list(events)

    assert asyncio.run(run()) == ("rewriter down", ["ranker cancelled"])


def test_a_cancelled_row_cancels_both_steps() -> None:
    """-x, Ctrl-C, a row no longer needed: rank_before and the rewrite both stop, and the
    row ends cancelled (not with an error)."""
    events: list[str] = []
    engine, row = _stalling_engine(set(), events)

    async def run() -> tuple[bool, list[str]]:
        task = asyncio.ensure_future(engine.run(row))
        for _ in range(5):
            await asyncio.sleep(0)  # both steps are waiting on the model
        task.cancel()
        done, _ = await asyncio.wait((task,), timeout=10)
        return task in done and task.cancelled(), sorted(events)

    assert asyncio.run(run()) == (True, ["ranker cancelled", "rewriter cancelled"])


def test_rank_after_shows_the_candidates_of_rank_before_with_the_target_rewritten(tmp_path: Path) -> None:
    """rank_after's candidates are written from rank_before's, the target's alone written
    again: its prompt must read as the rewritten candidates written afresh, in each form."""
    from conftest import copy_prompts

    prompts = copy_prompts(tmp_path / "prompts")
    template = "{{query}}\n{{candidates}}\n{{candidates_json}}\n{{candidates_jsonl}}\n"
    (prompts / "ranker_user.txt").write_text(template, encoding="utf-8")
    first, last = Candidate("a", "A", "one\ntwo"), Candidate("c", "C", "Best for tea")
    row = GeoRow("d.jsonl", 1, "red kettle", (first, Candidate("t", "T", 'steel "1.7" l'), last), "t", "q1")
    outcome = asyncio.run(GeoEngine(load_prompts(prompts), MockClient(), {"ranker": "m", "rewriter": "m"}).run(row))
    before, after = (call["messages"][1]["content"] for call in outcome.calls if call["role"] == "ranker")
    rewritten = ('Best for buyers who want a clear, reliable choice. steel "1.7" l Key specs are easy to scan, '
                 "with differentiated value over typical alternatives.")
    assert outcome.rewritten_description == rewritten
    assert before == render(template, candidate_values("red kettle", "q1", row.candidates))
    assert after == render(template, candidate_values("red kettle", "q1", (first, Candidate("t", "T", rewritten), last)))
    assert before.count('steel \\"1.7\\" l') == after.count('steel \\"1.7\\" l') == 2  # json and jsonl
    assert after.count("  description:\n  Best for buyers who want") == 1  # the block
    assert (outcome.rank_before, outcome.rank_after) == (2, 1)
