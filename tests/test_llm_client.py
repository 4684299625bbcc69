"""The OpenAI SDK client against the fake server: retries counted, causes named, no key."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from fake_openai import FakeOpenAI

from pytest_geo.llm.base import ChatRequest, ChatResponse, ModelError, chat_request, chat_response
from pytest_geo.llm.openai_client import OpenAIChatClient

SENTINEL = "sk-sentinel-7f3a9c1e5b"
RANKER = ChatRequest(
    "ranker", "m", ({"role": "system", "content": 'Answer {"ordered_ids": [...]}'},
                    {"role": "user", "content": 'Query: kettle\n[{"id": "a", "title": "kettle", "description": "x"}]'}),
)


def ask(server: FakeOpenAI, *, timeout: float = 5.0, max_retries: int = 2):
    async def go():
        client = OpenAIChatClient(SENTINEL, server.url, timeout=timeout, max_retries=max_retries)
        try:
            return await client.complete(RANKER)
        finally:
            await client.aclose()

    return asyncio.run(go())


@pytest.mark.e2e
def test_answer_and_tokens(fake_openai: FakeOpenAI) -> None:
    response = ask(fake_openai)
    assert '"ordered_ids": ["a"]' in response.text
    assert response.prompt_tokens > 0 and response.completion_tokens > 0 and response.retries == 0


@pytest.mark.e2e
def test_an_answer_served_as_text_plain_is_read(fake_openai: FakeOpenAI) -> None:
    fake_openai.fail_next("json_as_text")
    response = ask(fake_openai)
    assert '"ordered_ids": ["a"]' in response.text and response.prompt_tokens > 0 and response.retries == 0


@pytest.mark.e2e
def test_answer_fields_not_of_their_types_read_as_none(fake_openai: FakeOpenAI) -> None:
    fake_openai.fail_next("odd_types")
    response = ask(fake_openai)
    assert (response.text, response.prompt_tokens, response.completion_tokens, response.finish_reason) == ("", 0, 0, None)


@pytest.mark.e2e
@pytest.mark.parametrize("fault", ["429", "500", "drop", "slow"])
def test_transient_faults_are_retried_and_counted(fake_openai: FakeOpenAI, fault: str) -> None:
    fake_openai.slow_seconds = 1.5
    fake_openai.fail_next(fault)
    response = ask(fake_openai, timeout=0.5)
    assert response.retries == 1 and '"ordered_ids"' in response.text
    # A client's first call is tried once without the SDK's retries (so an unreachable
    # server fails fast), then with them: two attempts, one retry.
    assert len(fake_openai.requests) == 2


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("fault", "cause"),
    [("500", "HTTP 500 (upstream exploded) after 1 retry"), ("drop", "connection error ("),
     ("slow", "timed out after 0.5s after 1 retry")],
)
def test_exhausted_retries_name_the_cause(fake_openai: FakeOpenAI, fault: str, cause: str) -> None:
    fake_openai.slow_seconds = 1.5
    fake_openai.always = fault
    with pytest.raises(ModelError) as info:
        ask(fake_openai, timeout=0.5, max_retries=1)
    message = str(info.value)
    assert message.startswith("ranker model call failed: ") and cause in message
    assert "\n" not in message and info.value.retries == 1 and len(fake_openai.requests) == 2


@pytest.mark.e2e
def test_error_messages_never_carry_the_key(fake_openai: FakeOpenAI) -> None:
    fake_openai.always = "401"
    with pytest.raises(ModelError) as info:
        ask(fake_openai)
    assert "HTTP 401" in str(info.value) and "[key]" in str(info.value)
    assert SENTINEL not in str(info.value) and "sentinel" not in str(info.value)
    assert len(fake_openai.requests) == 1  # a 401 is not retried


@pytest.mark.unit
def test_a_request_filled_in_directly_is_the_dataclasss_own() -> None:
    """chat_request (every model call of the engine) makes what ChatRequest(...) makes,
    every field set, still frozen; a field ChatRequest gains must be added there too."""
    messages = ({"role": "system", "content": "s"}, {"role": "user", "content": "u"})
    made = chat_request("ranker", "gpt-x", messages, None, {"query": "q"}, 200, {"title": "ranking"})
    assert made == ChatRequest("ranker", "gpt-x", messages, None, {"query": "q"}, max_output_tokens=200,
                               response_schema={"title": "ranking"})
    assert chat_request("rewriter", "m", (), 0.5, {}, None, None, "low") == ChatRequest(
        "rewriter", "m", (), 0.5, {}, reasoning_effort="low")
    assert list(vars(made)) == [f.name for f in dataclasses.fields(ChatRequest)]
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.role = "rewriter"  # type: ignore[misc]


@pytest.mark.unit
def test_a_response_filled_in_directly_is_the_dataclasss_own() -> None:
    """chat_response (the mock's every answer) makes what ChatResponse(...) makes: the
    other fields at their defaults, in the fields' order, still frozen."""
    made = chat_response('{"ordered_ids": ["a"]}', 120, 4)
    assert made == ChatResponse('{"ordered_ids": ["a"]}', prompt_tokens=120, completion_tokens=4)
    assert (made.cached, made.retries, made.batch, made.finish_reason, made.cache_rejected) == (
        False, 0, False, None, False)
    assert list(vars(made)) == [f.name for f in dataclasses.fields(ChatResponse)]
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.text = ""  # type: ignore[misc]
