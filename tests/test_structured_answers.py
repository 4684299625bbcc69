"""Structured answers and bounded answers (#22): each role asks for a strict JSON Schema
answer, every call carries the output cap, an answer cut at the cap or over the answer
size cap fails its row at once; tested over HTTP with the real SDK against the fake
server, which enforces OpenAI's documented contract."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import openai
import pytest
from fake_openai import FakeOpenAI, structured_answer
from test_reporting import with_calls

from conftest import DUMMY_KEY, PROMPTS, GeoProject, cache_entries, egeo_workdir
from pytest_geo.cli import main
from pytest_geo.engine.answer_schemas import proposal_schema, ranking_schema, rewrite_schema
from pytest_geo.engine.experiment import GeoEngine
from pytest_geo.engine.prompts import load_prompts
from pytest_geo.llm.base import ChatRequest, ChatResponse
from pytest_geo.optimize.run import reflection

RANKING = {
    "title": "ranking", "type": "object",
    "properties": {"ordered_ids": {"type": "array", "items": {"type": "string", "enum": ["a0", "b0", "t0"]},
                                   "minItems": 3, "maxItems": 3}},
    "required": ["ordered_ids"], "additionalProperties": False,
}
REWRITE = {
    "title": "rewrite", "type": "object", "properties": {"rewritten_description": {"type": "string"}},
    "required": ["rewritten_description"], "additionalProperties": False,
}
PROPOSAL = {
    "title": "prompt_proposal", "type": "object",
    "properties": {"new_prompt": {"type": "string"}, "rationale": {"type": "string"}},
    "required": ["new_prompt", "rationale"], "additionalProperties": False,
}


@pytest.mark.unit
def test_each_roles_schema_is_closed_as_strict_mode_requires() -> None:
    assert ranking_schema(["a0", "b0", "t0"]) == RANKING
    assert rewrite_schema() == REWRITE
    assert proposal_schema() == PROPOSAL


@pytest.mark.unit
def test_ids_past_openais_enum_limits_go_without_an_enum_but_keep_their_count() -> None:
    many = [f"id-{i:04d}" for i in range(1001)]
    assert ranking_schema(many)["properties"]["ordered_ids"] == {
        "type": "array", "items": {"type": "string"}, "minItems": 1001, "maxItems": 1001}
    long_ids = [f"{i:03d}" + "x" * 57 for i in range(251)]  # 251 ids of 60 characters: 15,060 in all
    assert "enum" not in ranking_schema(long_ids)["properties"]["ordered_ids"]["items"]
    assert "enum" in ranking_schema(long_ids[:250])["properties"]["ordered_ids"]["items"]


def bodies(server: FakeOpenAI, role_key: str) -> list[dict[str, Any]]:
    """The request bodies whose system prompt asks for `role_key`."""
    return [r["body"] for r in server.requests if role_key in r["body"]["messages"][0]["content"]]


@pytest.mark.plugin
def test_every_call_sends_its_schema_strictly_and_the_output_cap(served_project: GeoProject) -> None:
    dataset = str(served_project.dataset(2))
    result = served_project.pytester.runpytest(dataset, "--geo-base-url", served_project.server.url,
                                               "--geo-report", "r.json")
    result.assert_outcomes(passed=2)
    rankings = bodies(served_project.server, "ordered_ids")
    rewrites = bodies(served_project.server, "rewritten_description")
    assert (len(rankings), len(rewrites)) == (4, 2)
    first = next(b for b in rankings if "red kettle number 0" in b["messages"][1]["content"])
    assert first["response_format"] == {"type": "json_schema",
                                        "json_schema": {"name": "ranking", "schema": RANKING, "strict": True}}
    assert rewrites[0]["response_format"] == {"type": "json_schema",
                                              "json_schema": {"name": "rewrite", "schema": REWRITE, "strict": True}}
    # sized to the answer (issue 37): 256 + each id's bytes and 8; 256 + twice the description's bytes
    assert {b["max_tokens"] for b in rankings} == {256 + 3 * (2 + 8)}
    assert {b["max_tokens"] for b in rewrites} == {256 + 2 * len("steel, 1.7 litres")}
    # The server answered in the schema's shape (bare JSON, no fence), which parsed.
    rows = with_calls(served_project.pytester.path / "r.json")["rows"]
    answers = [c["answer"] for row in rows for c in row["calls"] if c["role"] == "ranker"]
    assert sorted(answers) == sorted(structured_answer(body) or "" for body in rankings)
    assert all(set(json.loads(answer)) == {"ordered_ids"} for answer in answers)


@pytest.mark.plugin
def test_the_output_cap_comes_from_the_ini_too(served_project: GeoProject) -> None:
    served_project.pytester.makeini("[pytest]\ngeo_max_output_tokens = 777\n")
    served_project.run(str(served_project.dataset(1))).assert_outcomes(passed=1)
    assert {r["body"]["max_tokens"] for r in served_project.server.requests} == {777}


@pytest.mark.plugin
@pytest.mark.parametrize(("args", "message"), [
    (["--geo-max-output-tokens", "0"], "argument --geo-max-output-tokens: '0' must be at least 1"),
    (["-o", "geo_max_output_tokens=many"], "ini option geo_max_output_tokens: 'many' is not a whole number"),
])
def test_a_bad_output_cap_is_a_usage_error(served_project: GeoProject, args: list[str], message: str) -> None:
    result = served_project.run(str(served_project.dataset(1)), *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert message in result.stderr.str()
    assert served_project.server.requests == []


@pytest.mark.plugin
def test_answers_in_fences_and_prose_still_parse_from_a_server_that_ignores_the_schema(
        served_project: GeoProject) -> None:
    """A server that takes response_format but answers as it likes (E-GEO prompts, older
    local servers): the fenced ranking and the prose around it still parse."""
    served_project.server.fault_for = lambda body: "echo_headers" if "ordered_ids" in json.dumps(body) else None
    served_project.run(str(served_project.dataset(2)), "--geo-report", "r.json").assert_outcomes(passed=2)
    answers = [c["answer"] for row in with_calls(served_project.pytester.path / "r.json")["rows"]
               for c in row["calls"] if c["role"] == "ranker"]
    assert len(answers) == 4 and all(a.startswith("You sent {") and "```json\n{\"ordered_ids\"" in a for a in answers)


@pytest.mark.plugin
def test_an_answer_cut_at_the_output_cap_fails_its_row_at_once(served_project: GeoProject) -> None:
    """The ranking (19 tokens as the fake server counts them) fits a cap of 19; the
    rewrite (20) does not."""
    result = served_project.pytester.runpytest(str(served_project.dataset(2)), "--geo-base-url",
                                               served_project.server.url,
                                               "--geo-max-output-tokens", "19", "--geo-report", "r.json")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(["*error: rewriter answer cut at the output-token cap (--geo-max-output-tokens 19): "
                                 "raise it*"])
    assert len(bodies(served_project.server, "rewritten_description")) == 2  # never re-asked
    rows = with_calls(served_project.pytester.path / "r.json")["rows"]
    rewrite_calls = [c for row in rows for c in row["calls"] if c["role"] == "rewriter"]
    assert [c["error"] for c in rewrite_calls] == [
        "rewriter answer cut at the output-token cap (--geo-max-output-tokens 19): raise it"] * 2


@pytest.mark.e2e
def test_egeo_names_its_own_flag_for_a_cut_answer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  fake_openai: FakeOpenAI, capsys: pytest.CaptureFixture[str]) -> None:
    egeo_workdir(tmp_path, monkeypatch, rows=1)
    main(["evaluate", "--dataset", "rows.jsonl", "--prompts", str(PROMPTS), "--base-url", fake_openai.url,
          "--max-output-tokens", "19", "--no-cache"])
    assert ("rows.jsonl: r0: error: rewriter answer cut at the output-token cap (--max-output-tokens 19): raise it\n"
            in capsys.readouterr().err)
    assert {r["body"]["max_tokens"] for r in fake_openai.requests} == {19}


SUITE = '''
import pytest_geo

shout = pytest_geo.prompt("shout", "Say {{input}} loudly.")

shout_eval = pytest_geo.suite("shout", data={"items": [("hi", "HI")]})

@shout_eval.metric
def same(items, expected):
    return shout(items) == expected
'''


@pytest.mark.plugin
def test_a_prompt_procedures_cut_answer_fails_its_suite_row(served_project: GeoProject) -> None:
    served_project.pytester.makepyfile(test_shout=SUITE)
    result = served_project.run("test_shout.py", "--geo-max-output-tokens", "1")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*shout answer cut at the output-token cap (--geo-max-output-tokens 1): raise it*"])
    assert [r["body"]["max_tokens"] for r in served_project.server.requests] == [1]
    assert "response_format" not in served_project.server.requests[0]["body"]  # free text: no schema


@pytest.mark.plugin
def test_an_answer_over_the_size_cap_is_a_row_error_never_cached_or_reported_whole(
        served_project: GeoProject) -> None:
    served_project.server.fault_for = lambda body: "huge" if "rewritten_description" in json.dumps(body) else None
    args = [str(served_project.dataset(2)), "--geo-base-url", served_project.server.url,
            "--geo-report", "r.json", "--geo-html", "r.html", "--geo-cache-dir", "cache"]
    result = served_project.pytester.runpytest(*args)
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(["*error: rewriter answer of 2,097,181 characters is over the answer size cap "
                                 "(1,048,576 characters): not used*"])
    path = served_project.pytester.path
    for name in ("r.json", "r.html"):
        assert (path / name).stat().st_size < 200_000, name
    rows = with_calls(path / "r.json")["rows"]
    kept = [c["answer"] for row in rows for c in row["calls"] if c["role"] == "rewriter"]
    assert [len(a) for a in kept] == [4096 + len("\n[answer cut here in this report: 2,097,181 characters in all]")] * 2
    assert all(a.endswith("\n[answer cut here in this report: 2,097,181 characters in all]") for a in kept)
    assert max(len(json.dumps(entry)) for entry in cache_entries(path / "cache")) < 10_000
    served_project.server.reset()
    served_project.server.fault_for = lambda body: "huge" if "rewritten_description" in json.dumps(body) else None
    served_project.pytester.runpytest(*args).assert_outcomes(failed=2)
    assert len(bodies(served_project.server, "rewritten_description")) == 2  # asked again: not cached


def sdk_call(server: FakeOpenAI, **extra: Any) -> openai.BadRequestError:
    async def call() -> None:
        client = openai.AsyncOpenAI(api_key=DUMMY_KEY, base_url=server.url, max_retries=0)
        try:
            await client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}],
                                                 **extra)
        finally:
            await client.close()

    with pytest.raises(openai.BadRequestError) as refused:
        asyncio.run(call())
    return refused.value


@pytest.mark.e2e
def test_the_fake_server_refuses_a_strict_schema_that_leaves_an_object_open(fake_openai: FakeOpenAI) -> None:
    open_root = {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]}
    refused = sdk_call(fake_openai, response_format={
        "type": "json_schema", "json_schema": {"name": "open", "schema": open_root, "strict": True}})
    assert refused.body == {"message": "Invalid schema for response_format 'open': In context=(), "
                                       "'additionalProperties' is required to be supplied and to be false.",
                            "type": "invalid_request_error", "param": "response_format", "code": None}
    nested = {"type": "object", "additionalProperties": False, "required": ["o"],
              "properties": {"o": {"type": "object", "properties": {"y": {"type": "string"}},
                                   "additionalProperties": False}}}
    refused = sdk_call(fake_openai, response_format={
        "type": "json_schema", "json_schema": {"name": "nested", "schema": nested, "strict": True}})
    assert isinstance(refused.body, dict)
    assert refused.body["message"] == (
        "Invalid schema for response_format 'nested': In context=('properties', 'o'), 'required' is required to be "
        "supplied and to be an array including every key in properties. Missing 'y'.")


@pytest.mark.e2e
def test_the_fake_server_can_refuse_response_format_altogether(fake_openai: FakeOpenAI) -> None:
    fake_openai.refuse_response_format = True
    refused = sdk_call(fake_openai, response_format={
        "type": "json_schema", "json_schema": {"name": "rewrite", "schema": REWRITE, "strict": True}})
    assert refused.body == {"message": "Unsupported parameter: 'response_format' is not supported with this model.",
                            "type": "invalid_request_error", "param": "response_format",
                            "code": "unsupported_parameter"}


@pytest.mark.plugin
def test_a_server_without_response_format_gets_every_row_scored(served_project: GeoProject) -> None:
    """--geo-structured auto (the default): the schema goes out, the refusal is learned
    once (both roles' first calls are refused at once: neither stops the run), and the
    plain answers parse."""
    served_project.server.refuse_response_format = True
    result = served_project.pytester.runpytest(str(served_project.dataset(2)), "--geo-base-url",
                                               served_project.server.url)
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["requests changed to what the server accepts:",
                                 "  gpt-4o-mini: sent without response_format (the server refused it)"])
    refused = [r for r in served_project.server.requests if "response_format" in r["body"]]
    assert 1 <= len(refused) <= 2  # each process's calls in flight before it learned
    assert len(served_project.server.requests) - len(refused) == 6


class Recording:
    """A client that answers every request with `answer` and keeps the requests."""

    def __init__(self, answer: str) -> None:
        self.answer = answer
        self.requests: list[ChatRequest] = []

    async def complete(self, request: ChatRequest) -> ChatResponse:
        self.requests.append(request)
        return ChatResponse(self.answer)

    async def aclose(self) -> None:
        pass


@pytest.mark.unit
def test_the_optimizer_asks_for_a_proposal_in_its_schema_with_the_cap() -> None:
    client = Recording('Thoughts first. {"new_prompt": "Rewrite {{description}} for {{query}}.", "rationale": "r"}')
    engine = GeoEngine(load_prompts(PROMPTS), client, {"ranker": "m", "rewriter": "m", "optimizer": "o"},
                       max_output_tokens=99)
    ask = reflection(engine, PROMPTS, ["description"], ["query"]).ask
    answer = asyncio.run(ask("system", "user", {}, lambda text: text))
    assert answer.startswith("Thoughts first.")
    (request,) = client.requests
    assert (request.role, request.response_schema, request.max_output_tokens) == ("optimizer", PROPOSAL, 99)
