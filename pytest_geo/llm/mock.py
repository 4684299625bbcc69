"""A deterministic offline model for every role: no network, no key.

It answers in the same JSON the prompts ask for, so answers still go through the real
parsing and validation. As in the E-GEO harness, the mock rewriter adds a ranking signal
that the mock ranker rewards: results verify the pipeline, not model quality.
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Mapping
from typing import Any

from pytest_geo.llm.base import ChatRequest, ChatResponse

SIGNAL = "Top match for your search."
WORD = re.compile(r"[a-z0-9]+")


def words(text: str) -> set[str]:
    return set(WORD.findall(text.lower()))


def ranker_order(context: Mapping[str, Any]) -> list[str]:
    """Candidates with the signal first, then by words shared with the query; ties keep
    the listed order."""
    query = words(str(context.get("query", "")))
    candidates = list(context.get("candidates", ()))

    def key(indexed: tuple[int, Mapping[str, str]]) -> tuple[int, int, int]:
        index, c = indexed
        text = f"{c.get('title', '')} {c.get('description', '')}"
        return (0 if SIGNAL in text else 1, -len(query & words(text)), index)

    return [str(c.get("id")) for _, c in sorted(enumerate(candidates), key=key)]


def rewrite(context: Mapping[str, Any]) -> str:
    description = str(context.get("description", ""))
    return description if description.startswith(SIGNAL) else f"{SIGNAL} {description}"


# What the mock optimizer may add to a template, one instruction per proposal.
INSTRUCTIONS = (
    "Lead with the single fact from the original description that best answers the query.",
    "Reuse the shopper's own words from the query where the original facts allow it.",
    "Put measurable facts (sizes, weights, capacities) before adjectives.",
    "Leave out facts that do not bear on the query instead of padding.",
    "Write at most two short sentences, no lists.",
    "Name the kind of product the query asks for in the first sentence.",
)


def propose(context: Mapping[str, Any]) -> dict[str, str]:
    """A deterministic 'reflection': the current prompt plus one instruction it lacks.

    Which one depends on the run's seed and the proposal number in the context, so
    different seeds and iterations propose different templates, and a repeated run
    proposes the same ones."""
    current = str(context.get("current_prompt", ""))
    salt = f"{context.get('seed', '')}\x1f{context.get('proposal', '')}"
    order = sorted(INSTRUCTIONS, key=lambda s: zlib.crc32(f"{salt}\x1f{s}".encode()))
    addition = next((s for s in order if s not in current), None)
    if addition is None:
        return {"new_prompt": current, "rationale": "mock: nothing left to add"}
    return {"new_prompt": f"{current.rstrip()}\n{addition}\n", "rationale": f"mock: {addition}"}


def _tokens(text: str) -> int:
    return len(text.split())


class MockClient:
    """Answers from the request's structured context; never looks at the network."""

    async def complete(self, request: ChatRequest) -> ChatResponse:
        context = request.context
        if request.role == "procedure":  # a prompt procedure: the mock echoes its input
            text = str(context.get("input", ""))
            prompt = sum(_tokens(m.get("content", "")) for m in request.messages)
            return ChatResponse(text=text, prompt_tokens=prompt, completion_tokens=_tokens(text))
        if request.role == "ranker":
            answer: dict[str, Any] = {"ordered_ids": ranker_order(context)}
        elif request.role == "rewriter":
            answer = {"rewritten_description": rewrite(context)}
        else:
            answer = propose(context)
        text = json.dumps(answer, ensure_ascii=False)
        prompt = sum(_tokens(m.get("content", "")) for m in request.messages)
        return ChatResponse(text=text, prompt_tokens=prompt, completion_tokens=_tokens(text))

    async def aclose(self) -> None:
        return None
