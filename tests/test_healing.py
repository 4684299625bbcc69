"""Requests healed when a server refuses them (llm/healing.py): a 400 about one row's
content is that row's error, never the run's, even before any call has succeeded."""

from __future__ import annotations

import asyncio
import json

import pytest

from conftest import GeoProject
from pytest_geo.llm.base import ChatRequest, ChatResponse, RequestRefused, ServerUnusable
from pytest_geo.llm.breaker import Breaker
from pytest_geo.llm.healing import HealingClient
from pytest_geo.llm.profiles import Refusal


class RefusesOneRow:
    """A backend refusing the request whose prompt holds "too long" with `code`."""

    def __init__(self, code: str | None) -> None:
        self.code = code
        self.calls = 0

    async def complete(self, request: ChatRequest) -> ChatResponse:
        self.calls += 1
        if "too long" in request.messages[0]["content"]:
            refusal = Refusal("This model's maximum context length is 128000 tokens.", "messages", self.code)
            raise RequestRefused("ranker model call failed: HTTP 400", refusal)
        return ChatResponse(text="{}")

    async def aclose(self) -> None:
        pass


def ask(client: HealingClient, content: str) -> ChatResponse:
    return asyncio.run(client.complete(ChatRequest("ranker", "gpt-4o-mini", ({"role": "user", "content": content},))))


@pytest.mark.unit
@pytest.mark.parametrize("code", ["context_length_exceeded", "string_above_max_length", "content_policy_violation",
                                  "invalid_prompt"])
def test_a_rows_content_refused_before_any_success_fails_only_that_row(code: str) -> None:
    backend = RefusesOneRow(code)
    breaker = Breaker(backend, None, consecutive=3)
    client = HealingClient(breaker, on_unfixable=breaker.refused)
    with pytest.raises(RequestRefused) as refused:  # the row's own error, not ServerUnusable
        ask(client, "a prompt too long")
    assert not isinstance(refused.value, ServerUnusable)
    assert breaker.tripped is None
    assert ask(client, "a short prompt").text == "{}"  # the next row is sent and answered
    assert backend.calls == 2


@pytest.mark.unit
def test_a_400_no_change_fixes_before_any_success_stops_the_run() -> None:
    """The contrast: a refusal not about one row's content means no call can work."""
    breaker = Breaker(RefusesOneRow(None), None, consecutive=3)
    client = HealingClient(breaker, on_unfixable=breaker.refused)
    with pytest.raises(ServerUnusable):
        ask(client, "a prompt too long")
    assert breaker.tripped is not None


@pytest.mark.plugin
def test_the_first_call_refused_for_its_context_length_fails_its_row_and_the_run_goes_on(
        served_project: GeoProject) -> None:
    served_project.server.fault_for = (
        lambda body: "context_length" if "red kettle number 0" in json.dumps(body) else None)
    result = served_project.run(str(served_project.dataset(4)), "--geo-concurrency", "1")
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines(["rows.jsonl:1: error: * HTTP 400 (This model's maximum context length is *"])
    result.stdout.no_fnmatch_line("*pytest-geo::model_server*")
    others = [r for r in served_project.server.requests if "red kettle number 0" not in json.dumps(r["body"])]
    assert len(others) == 3 * 3  # every other row: ranked before, rewritten, ranked after
