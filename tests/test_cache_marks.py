"""Anthropic's models cache a prompt only where the request marks it (`cache_control`):
through OpenRouter, a long system prompt of an `anthropic/` model is sent marked, and the
tokens written to the cache (OpenRouter's `usage.prompt_tokens_details.cache_write_tokens`)
cost the model's cache-write price, geo_prices' fourth number (issue 35's half cost).
The budget reserves every prompt token at the higher of the input and write prices."""

from __future__ import annotations

import json
from typing import Any

import pytest

from conftest import DUMMY_KEY, GeoProject, prices_ini
from pytest_geo.llm.base import ChatRequest
from pytest_geo.llm.budget import BudgetClient, prompt_token_bound
from pytest_geo.llm.ledger import BudgetLimits, Ledger
from pytest_geo.llm.openai_client import completion_fields
from pytest_geo.llm.prices import PriceError, parse_price_lines
from pytest_geo.llm.profiles import with_cache_mark
from pytest_geo.price import Price

LONG = "Rank the products by how well they fit the query. " * 100  # 5,100 characters
MARK = {"type": "ephemeral"}


@pytest.mark.unit
def test_a_long_system_prompt_is_marked_and_nothing_else_is() -> None:
    body = {"model": "anthropic/claude-sonnet-4.5",
            "messages": [{"role": "system", "content": LONG}, {"role": "user", "content": "q"}]}
    assert with_cache_mark(body)["messages"] == [
        {"role": "system", "content": [{"type": "text", "text": LONG, "cache_control": MARK}]},
        {"role": "user", "content": "q"}]
    assert body["messages"][0]["content"] == LONG  # the caller's body is left as it was
    short = {"model": "m", "messages": [{"role": "system", "content": "x" * 4095}, {"role": "user", "content": "q"}]}
    assert with_cache_mark(short) == short
    no_system = {"model": "m", "messages": [{"role": "user", "content": LONG}]}
    assert with_cache_mark(no_system) == no_system


@pytest.mark.unit
def test_the_cache_write_price_is_geo_prices_fourth_number() -> None:
    assert parse_price_lines(["anthropic/claude-sonnet-4.5 = 3.00, 15.00, 0.30, 3.75"]) == {
        "anthropic/claude-sonnet-4.5": Price(3.0, 15.0, 0.3, 3.75)}
    with pytest.raises(PriceError, match="line 1 'm = 3, 15, 0.3, 2.5': the cache-write price must be at least "
                                         "the input price"):
        parse_price_lines(["m = 3, 15, 0.3, 2.5"])
    with pytest.raises(PriceError, match="expected 'model = input_per_million, output_per_million"
                                         r"\[, cached_input_per_million\[, cache_write_per_million\]\]'"):
        parse_price_lines(["m = 1, 2, 0.5, 3, 4"])


@pytest.mark.unit
def test_written_tokens_cost_the_write_price_read_ones_the_cached_price() -> None:
    price = Price(3.0, 15.0, 0.3, 3.75)
    # 1,000 prompt tokens: 600 read (x 0.30), 300 written (x 3.75), 100 plain (x 3.00); 50 out (x 15)
    assert price.nanodollars(1000, 50, cached_tokens=600, written_tokens=300) == 180_000 + 1_125_000 + 300_000 + 750_000
    assert price.nanodollars(1000, 0, cached_tokens=900, written_tokens=300) == 270_000 + 375_000  # 100 left to write
    assert Price(3.0, 15.0).nanodollars(1000, 0, written_tokens=1000) == 3_000_000  # no write price: the input's


def answer(details: object) -> dict[str, Any]:
    return {"choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 5, "prompt_tokens_details": details}}


@pytest.mark.unit
@pytest.mark.parametrize(("details", "read", "written"), [
    ({"cached_tokens": 0, "cache_write_tokens": 80}, 0, 80),
    ({"cached_tokens": 60, "cache_write_tokens": 40}, 60, 40),
    ({"cached_tokens": 60, "cache_write_tokens": 41}, 60, 0),  # more than the rest: not believable
    ({"cache_write_tokens": "80"}, 0, 0),
    (None, 0, 0),
])
def test_cache_write_tokens_are_read_when_believable(details: object, read: int, written: int) -> None:
    fields = completion_fields(answer(details))
    assert (fields.cached_input_tokens, fields.cache_write_tokens) == (read, written)


@pytest.mark.unit
def test_the_reservation_prices_every_prompt_token_at_the_write_price() -> None:
    request = ChatRequest("ranker", "claude", ({"role": "user", "content": "x" * 400},), max_output_tokens=100)
    client = BudgetClient(object(), Ledger(BudgetLimits(1.0, None)),  # type: ignore[arg-type]
                          {"claude": Price(3.0, 15.0, 0.3, 3.75)})
    prompt = prompt_token_bound(request)
    assert client.worst_case(request).nanousd == prompt * 3750 + 100 * 15_000


def marked_project(served_project: GeoProject) -> GeoProject:
    path = served_project.pytester.path
    (path / "long.txt").write_text(LONG + "\n" + (path / "prompts" / "ranker_system.txt").read_text(encoding="utf-8"),
                                   encoding="utf-8")
    served_project.pytester.makeini(
        prices_ini("anthropic/claude-sonnet-4.5 = 3.00, 15.00, 0.30, 3.75", "openai/gpt-4o = 2.50, 10.00",
                   "gpt-4o-mini = 0.15, 0.60")
        + f"geo_endpoints =\n    openrouter = {served_project.server.url} OPENROUTER_API_KEY\n"
        "geo_judges =\n    claude = openrouter/anthropic/claude-sonnet-4.5 system=long.txt\n"
        "    other = openrouter/openai/gpt-4o system=long.txt\n"
        "    short = openrouter/anthropic/claude-sonnet-4.5\n")
    return served_project


@pytest.mark.plugin
def test_through_openrouter_claudes_long_system_prompt_goes_marked(served_project: GeoProject,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENROUTER_API_KEY", DUMMY_KEY)
    served_project.server.usage_as = {"prompt_tokens": 2000, "completion_tokens": 10, "total_tokens": 2010,
                                      "prompt_tokens_details": {"cached_tokens": 1200, "cache_write_tokens": 600}}
    marked_project(served_project).dataset(1)
    result = served_project.run("rows.jsonl", "--geo-report", "r.json", "--geo-no-cache")
    result.assert_outcomes(passed=1)
    systems: dict[str, set[str]] = {}
    for request in served_project.server.requests:
        body = request["body"]
        first = body["messages"][0]
        if first["role"] != "system" or "ordered_ids" not in json.dumps(first):
            continue  # the rewriter's call
        shape = "marked" if isinstance(first["content"], list) else "plain"
        if shape == "marked":
            assert first["content"][0]["cache_control"] == MARK and first["content"][0]["text"].startswith(LONG)
        systems.setdefault(body["model"], set()).add(shape + (" long" if LONG in json.dumps(first) else ""))
    assert systems == {"anthropic/claude-sonnet-4.5": {"marked long", "plain"}, "openai/gpt-4o": {"plain long"}}
    data = json.loads((served_project.pytester.path / "r.json").read_text(encoding="utf-8"))
    by_endpoint = data["endpoint_usage"]["openrouter"]
    # 3 judges x 2 calls: each 2,000 prompt tokens, 1,200 read and 600 written
    assert (by_endpoint["cached_input_tokens"], by_endpoint["cache_write_tokens"]) == (7200, 3600)
    # claude's 4 calls: 200 x 3.00 + 1,200 x 0.30 + 600 x 3.75 + 10 x 15 = $0.00336 each; gpt-4o's 2 calls have
    # no cached or write price: 2,000 x 2.50 + 10 x 10 = $0.0051 each
    assert by_endpoint["cost_nanousd"] == 4 * 3_360_000 + 2 * 5_100_000
    # the rewriter (gpt-4o-mini, no cached or write price): 2,000 x 0.15 + 10 x 0.60
    assert data["cost"]["total"] == 0.023946  # with claude's and gpt-4o's $0.02364
    result.stdout.fnmatch_lines(["  openrouter: calls=6 * cached_input_tokens=7200 cache_write_tokens=3600 "
                                 "cost=$0.02364"])
