"""Prompt tokens a provider's prompt cache served (`usage.prompt_tokens_details.cached_tokens`)
cost the model's cached-input price (issue 39): in the usage and cost lines, the JSON
report and the budget's settlement; the budget's reservation stays at the input price, an
upper bound. A count that is not believable reads as none cached."""

from __future__ import annotations

import json
from typing import Any

import pytest

from conftest import GeoProject
from pytest_geo.llm.base import ChatRequest, ChatResponse
from pytest_geo.llm.budget import BudgetClient, prompt_token_bound
from pytest_geo.llm.ledger import BudgetLimits, Cost, Ledger
from pytest_geo.llm.openai_client import completion_fields
from pytest_geo.price import Price

# Every answer reports 200 prompt tokens, 120 of them cached, and 20 completion tokens;
# 2 rows make 6 calls (4 ranker, 2 rewriter).
CACHED_USAGE = {"prompt_tokens": 200, "completion_tokens": 20, "total_tokens": 220,
                "prompt_tokens_details": {"cached_tokens": 120}}


def report(project: GeoProject) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((project.pytester.path / "r.json").read_text(encoding="utf-8"))
    return data


@pytest.mark.plugin
def test_cached_tokens_cost_the_cached_price_in_every_figure(served_project: GeoProject) -> None:
    """gpt-4o-mini at $0.15 input, $0.075 cached input, $0.60 output per million: a call is
    80 x 0.15 + 120 x 0.075 + 20 x 0.60 = $0.000033 (not $0.000042 at the input price)."""
    served_project.server.usage_as = CACHED_USAGE
    result = served_project.priced("gpt-4o-mini = 0.15, 0.60, 0.075").run(
        str(served_project.dataset(2)), "--geo-report", "r.json", "--geo-budget", "1")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([
        "  ranker: calls=4 cache_hits=0 retries=0 errors=0 prompt_tokens=800 completion_tokens=80 "
        "cached_input_tokens=480 cost=$0.0001320",
        "  rewriter: calls=2 cache_hits=0 retries=0 errors=0 prompt_tokens=400 completion_tokens=40 "
        "cached_input_tokens=240 cost=$0.00006600",
        "cost: $0.0001980 at list prices (2025-08 table and geo_prices)",
        "budget: $0.0001980 spent of $1.000*"])
    data = report(served_project)
    assert (data["usage"]["ranker"]["cached_input_tokens"], data["usage"]["rewriter"]["cached_input_tokens"]) == (
        480, 240)
    assert (data["usage"]["ranker"]["cost_nanousd"], data["usage"]["rewriter"]["cost_nanousd"]) == (132_000, 66_000)
    assert data["cost"]["total"] == 0.000198
    assert data["cost"]["roles"]["ranker"]["cost"] == 0.000132
    assert data["budget"]["spent_usd"] == 0.000198  # the settlement charged the cached price


@pytest.mark.plugin
@pytest.mark.parametrize(("line", "ranker", "total"), [
    ("gpt-4o-mini = 0.15, 0.60, 0.015", "$0.0001032", "$0.0001548"),  # 80 x 0.15 + 120 x 0.015 + 20 x 0.60
    ("gpt-4o-mini = 0.15, 0.60", "$0.0001680", "$0.0002520"),  # no cached price: the input price
])
def test_the_cached_price_is_geo_prices_third_number(served_project: GeoProject, line: str, ranker: str,
                                                    total: str) -> None:
    served_project.server.usage_as = CACHED_USAGE
    result = served_project.priced(line).run(str(served_project.dataset(2)), "--geo-budget", "1")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([f"  ranker: * cached_input_tokens=480 cost={ranker}",
                                 f"cost: {total} at list prices*", f"budget: {total} spent of $1.000*"])


@pytest.mark.plugin
def test_a_cached_count_above_the_prompts_reads_as_none_cached(served_project: GeoProject) -> None:
    served_project.server.usage_as = {**CACHED_USAGE, "prompt_tokens_details": {"cached_tokens": 201}}
    result = served_project.priced().run(str(served_project.dataset(2)), "--geo-report", "r.json")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["cost: $0.0002520 at list prices*"])  # 200 x 0.15 + 20 x 0.60 a call
    assert "cached_input_tokens=" not in result.stdout.str()
    assert report(served_project)["usage"]["ranker"]["cached_input_tokens"] == 0


def answer(usage: object) -> dict[str, Any]:
    return {"choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}], "usage": usage}


@pytest.mark.unit
@pytest.mark.parametrize(("details", "cached"), [
    ({"cached_tokens": 120}, 120),
    ({"cached_tokens": 200}, 200),  # the whole prompt
    ({"cached_tokens": 0}, 0),
    (None, 0),
    ("120", 0),
    ({}, 0),
    ({"cached_tokens": None}, 0),
    ({"cached_tokens": "120"}, 0),
    ({"cached_tokens": 12.0}, 0),
    ({"cached_tokens": True}, 0),
    ({"cached_tokens": -5}, 0),
    ({"cached_tokens": 201}, 0),  # more than the prompt's
    ({"cached_tokens": 10**12}, 0),
])
def test_cached_tokens_are_read_only_when_believable(details: object, cached: int) -> None:
    fields = completion_fields(answer({"prompt_tokens": 200, "completion_tokens": 20,
                                       "prompt_tokens_details": details}))
    assert (fields.prompt_tokens, fields.completion_tokens, fields.cached_input_tokens) == (200, 20, cached)


@pytest.mark.unit
def test_an_answer_without_believable_usage_has_nothing_cached() -> None:
    fields = completion_fields(answer({"prompt_tokens": "200", "completion_tokens": 20,
                                       "prompt_tokens_details": {"cached_tokens": 120}}))
    assert (fields.usage_reported, fields.cached_input_tokens) == (False, 0)


@pytest.mark.unit
def test_the_reservation_prices_every_prompt_token_at_the_input_price() -> None:
    """$1 input, $0.10 cached input, $4 output per million: the worst case is what the call
    would cost with nothing cached, the settlement what it cost."""
    client = BudgetClient(object(), Ledger(BudgetLimits(nanousd=10**9)),  # type: ignore[arg-type]
                          {"m": Price(1.0, 4.0, 0.1)})
    request = ChatRequest("ranker", "m", ({"role": "user", "content": "x" * 100},), max_output_tokens=50)
    bound = prompt_token_bound(request)
    assert bound == 120  # 100 bytes, 8 for the message, 8 priming the answer, the role's 4 bytes
    assert client.worst_case(request) == Cost(120 * 1_000 + 50 * 4_000, 170)
    response = ChatResponse(text="ok", prompt_tokens=120, completion_tokens=50, cached_input_tokens=100)
    assert client.actual(request, response) == Cost(20 * 1_000 + 100 * 100 + 50 * 4_000, 170)
    assert client.actual(request, response).nanousd < client.worst_case(request).nanousd
