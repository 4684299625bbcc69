"""The OpenAI SDK client against the fake server: retries counted, causes named, no key."""

from __future__ import annotations

import asyncio

import pytest
from fake_openai import FakeOpenAI

from pytest_geo.llm.base import ChatRequest, ModelError
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
