"""`egeo optimize --apply` never adopts a prompt that won only because rows errored on
the current one: candidates compare on the validation rows both scored without error
(paired, as the baseline gate does), and --apply is refused, saying so, when
validation rows errored."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_optimize import Project, Recording, make_project, run

from pytest_geo.llm.base import ChatRequest, ChatResponse
from pytest_geo.llm.mock import INSTRUCTIONS

pytestmark = pytest.mark.unit

SMOKE_QUERIES = [json.loads(line)["query"] for line in
                 (Path(__file__).resolve().parents[1] / "eval/datasets/geo_smoke.jsonl").read_text().splitlines()]


class FailsOnTheCurrentPrompt(Recording):
    """The mock, except that the rewriter call fails, for the current prompt only, on
    the first three rows: every proposal the mock optimizer makes scores what the
    current prompt scores on the rows that did not fail."""

    async def complete(self, request: ChatRequest) -> ChatResponse:
        template = str(request.context.get("template", ""))
        if (request.role == "rewriter" and not any(i in template for i in INSTRUCTIONS)
                and request.context.get("query") in SMOKE_QUERIES[:3]):
            raise RuntimeError("the service is overloaded")
        return await super().complete(request)


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return make_project(tmp_path / "p")


def test_a_proposal_that_wins_only_by_the_current_prompts_errors_is_not_applied(
        project: Project, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    before = project.working.read_bytes()
    code, _ = run(monkeypatch, project, "--iters", "1", "--apply",
                  client=FailsOnTheCurrentPrompt())
    captured = capsys.readouterr()
    assert project.working.read_bytes() == before
    assert code == 0  # nothing to refuse: paired on the 5 clean rows, the proposal only ties
    scores = json.loads(project.scores.read_text())
    assert (scores["best_candidate"], scores["best_is_current_prompt"], scores["applied"]) == (0, True, False)
    assert scores["validation_errors"] == {"current_prompt": 3, "best": 3}
    assert "candidate 0 (current prompt): validation avg_rank_improvement=1.2500 " in captured.err
    assert "(3 rows errored: left out of comparisons)" in captured.err
    assert "validation rows with an error (left out of every comparison): current prompt 3 of 8, candidate 0 3 of 8" \
        in captured.err


class BetterButErrors(FailsOnTheCurrentPrompt):
    """As above, and the current prompt also loses on the clean rows: the proposal is
    better paired, yet chosen over rows whose score is unknown."""

    async def complete(self, request: ChatRequest) -> ChatResponse:
        template = str(request.context.get("template", ""))
        if request.role == "rewriter" and not any(i in template for i in INSTRUCTIONS) \
                and request.context.get("query") in SMOKE_QUERIES[3:]:
            return ChatResponse(json.dumps({"rewritten_description": request.context["description"]}))
        return await super().complete(request)


def test_apply_is_refused_with_an_error_when_validation_rows_errored(
        project: Project, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    before = project.working.read_bytes()
    code, _ = run(monkeypatch, project, "--iters", "1", "--apply", client=BetterButErrors())
    captured = capsys.readouterr()
    assert code == 1
    assert project.working.read_bytes() == before
    scores = json.loads(project.scores.read_text())
    assert (scores["best_candidate"], scores["applied"]) == (1, False)
    assert scores["apply_refused"] == "validation rows errored (current prompt 3 of 8, candidate 1 0 of 8)"
    assert ("egeo: error: rewriter_user: validation rows errored (current prompt 3 of 8, candidate 1 0 of 8); "
            "not applied") in captured.err
    assert json.loads(captured.out)["applied"] is False
