"""The key never reaches a file or the terminal (issue 26): the patterns that replace
key-like tokens, on their own, and the run's key in every form an answer can carry it."""

from __future__ import annotations

import pytest

from pytest_geo.llm.openai_client import ANSWER_KEY_LIKE, KEY_LIKE, OpenAIChatClient


@pytest.mark.parametrize(("text", "scrubbed"), [
    ("sk-ab12", "[key]"),
    ("token-xyz99", "[key]"),
    ("sk-proj-****abcd", "[key]"),
    ("KEY-abcd", "[key]"),
    ("refused sk-ab12, retry", "refused [key], retry"),
    ("sk-ab1", "sk-ab1"),  # 3 characters: too short to be a key
    ("token-xyz", "token-xyz"),
    ("risk-free monkey-business", "risk-free monkey-business"),  # not at a word start
    ("tokens-abcd", "tokens-abcd"),
])
def test_error_messages_replace_key_like_tokens_of_four_characters_or_more(text: str, scrubbed: str) -> None:
    assert KEY_LIKE.sub("[key]", text) == scrubbed


@pytest.mark.parametrize(("text", "redacted"), [
    ("echo sk-abcdefghijklmnop.", "echo [key]."),  # sk- and 16 characters
    ("sk-proj-abcdefghijklmnop", "[key]"),
    ("sk-abcdefghijklmno", "sk-abcdefghijklmno"),  # 15: prose, not a key
    ("a key-ring and token-based auth", "a key-ring and token-based auth"),
])
def test_answers_replace_only_what_looks_like_a_secret_key(text: str, redacted: str) -> None:
    assert ANSWER_KEY_LIKE.sub("[key]", text) == redacted


def test_scrub_replaces_the_run_key_and_other_key_like_tokens_in_one_line() -> None:
    client = OpenAIChatClient(api_key="Zq9-not-shaped-like-a-key")
    line = client.scrub("HTTP 401: key Zq9-not-shaped-like-a-key refused;\nalso sk-ab12 and token-xyz99")
    assert line == "HTTP 401: key [key] refused; also [key] and [key]"
