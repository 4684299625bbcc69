"""Answer parsing: the documented rule for finding the answer object, in time linear in
the answer's length whatever it holds (answers are untrusted input)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from typing import Any
from unittest import mock

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pytest_geo.engine import answers
from pytest_geo.engine.answers import UnusableAnswer, parse_ranking, parse_rewrite
from pytest_geo.llm import answer_json
from pytest_geo.llm.answer_json import AnswerError, _fenced_blocks, extract_json_object
from pytest_geo.llm.base import ChatResponse

pytestmark = pytest.mark.unit

# The implementation before linear parsing (raw_decode at every `{`), kept as the
# reference the new one must agree with: it took 9 s on 100 KB of `{`.
OLD_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.DOTALL)


def old_extract(text: str, key: str | None = None) -> dict[str, Any]:
    whole = _old_loads(text.strip())
    if whole is not None:
        return whole
    fenced = [value for block in OLD_FENCE.findall(text) if (value := _old_loads(block)) is not None]
    inline = list(_old_objects_in(text))
    for candidates in (fenced, inline):
        fitting = [value for value in candidates if key is None or key in value]
        if fitting:
            return fitting[-1] if key is not None else fitting[0]
    if fenced or inline:
        return (fenced or inline)[0]
    raise AnswerError("no JSON object")


def _old_loads(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _old_objects_in(text: str) -> Iterator[dict[str, Any]]:
    decoder = json.JSONDecoder()
    for match in re.finditer(r"\{", text):
        try:
            value, _ = decoder.raw_decode(text, match.start())
        except ValueError:
            continue
        if isinstance(value, dict):
            yield value


def outcome(parse: Any, text: str, key: str | None) -> Any:
    try:
        return parse(text, key)
    except AnswerError:
        return "no answer"


KEYS = ("ordered_ids", "rewritten_description", None)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-9, 99) | st.text("ab{}\"\\ ", max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["ordered_ids", "a", "b", ""]),
                                                               inner, max_size=3),
    max_leaves=6,
)
pieces = st.one_of(
    json_values.map(json.dumps),
    json_values.map(lambda v: json.dumps(v, indent=1)),
    st.sampled_from(["{", "}", "[", "]", '"', ":", ",", "\\", " ", "\n", "```", "```json\n", "json", "x", "1",
                     '{"ordered_ids": ', '{"a": ', '"ordered_ids"', "{}", "true", "\\u0061", "\ufeff", "\t"]),
    st.text('{}[]":,\\ `a1\n', max_size=6),
)
texts = st.lists(pieces, max_size=10).map("".join)


@settings(max_examples=300, deadline=None)
@given(texts, st.sampled_from(KEYS))
@example('{"a": 1} {"ordered_ids": ["x"]} {"ordered_ids": ["y"]', "ordered_ids")
@example('["{", ":1}"] {"ordered_ids": []}', None)
@example('```json\n{"a": 1}\n``` {"ordered_ids": ["z"]} {"b": 2}', "ordered_ids")
@example('{"a": {"ordered_ids": ["in"]}, "a": 2} x', "ordered_ids")
def test_the_answer_found_is_the_one_the_quadratic_search_found(text: str, key: str | None) -> None:
    assert outcome(extract_json_object, text, key) == outcome(old_extract, text, key)


@settings(max_examples=150, deadline=None)
@given(texts, st.sampled_from(KEYS), st.sampled_from([1, 5, 17]))
def test_decoding_in_windows_finds_what_decoding_the_rest_of_the_text_finds(
        text: str, key: str | None, window: int) -> None:
    """Windows far smaller than the answers, so decodes run out of them mid-token."""
    with mock.patch.object(answer_json, "FIRST_WINDOW", window):
        assert outcome(extract_json_object, text, key) == outcome(old_extract, text, key)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["```", "```json", "```JSON", " ", "\n", "x", "{}", "`", "j"]), max_size=12).map("".join))
def test_fences_are_found_as_the_fence_pattern_found_them(text: str) -> None:
    assert list(_fenced_blocks(text)) == OLD_FENCE.findall(text)


@pytest.mark.parametrize(("text", "expected"), [
    ('\n {"ordered_ids": ["whole"], "n": {"ordered_ids": ["in"]}}\t', ["whole"]),  # whitespace around it
    ('{"ordered_ids": ["whole"], "n": {"ordered_ids": ["in"]}} x', ["in"]),  # data after it: not the whole text
    ('\ufeff{"ordered_ids": ["whole"], "n": {"ordered_ids": ["in"]}}', ["in"]),  # json.loads refuses a BOM
])
def test_the_whole_text_is_the_answer_when_json_loads_reads_it_whole(text: str, expected: list[str]) -> None:
    assert extract_json_object(text, "ordered_ids")["ordered_ids"] == expected


def test_the_documented_order_whole_text_then_fences_then_last_object_then_first() -> None:
    assert extract_json_object(' {"ordered_ids": ["w"]} ', "ordered_ids") == {"ordered_ids": ["w"]}
    fenced = 'x ```json\n{"ordered_ids": ["f"]}\n``` then {"ordered_ids": ["p"]}'
    assert extract_json_object(fenced, "ordered_ids") == {"ordered_ids": ["f"]}
    prose = 'quoted {"ordered_ids": ["evil"]} and mine: {"ordered_ids": ["mine"]} {"other": 1}'
    assert extract_json_object(prose, "ordered_ids") == {"ordered_ids": ["mine"]}
    assert extract_json_object('a {"first": 1} b {"second": 2}', "ordered_ids") == {"first": 1}
    nested = 'wrapped: {"answer": {"ordered_ids": ["n"]}} done'
    assert extract_json_object(nested, "ordered_ids") == {"ordered_ids": ["n"]}


def test_an_answer_nested_past_the_stack_is_unusable_not_a_crash() -> None:
    deep = '{"a":' * 5000 + "1" + "}" * 5000
    with pytest.raises(AnswerError, match="^no usable JSON object found within the search's budget in 30,001 "):
        parse_rewrite(deep)


MiB = 1 << 20
# Answers of every shape up to the answer cap (1 MiB), as #26's attacks built them.
SHAPES = {
    "100 KB of {": "{" * 100_000,
    "1 MiB of {": "{" * MiB,
    "1 MiB of {\"": '{"' * (MiB // 2),
    "1 MiB array nested 100 levels": '{"a":' + "[" * 100 + "1," * (MiB // 2 - 200) + "]" * 100 + " x}",
    "1 MiB of objects nested 100 levels": '{"a":' * 100 + "[" + "1," * (MiB // 2 - 400) + "1]" + "}" * 99 + " x",
    "an unclosed fence and 1 MiB of spaces": "```json" + " " * MiB,
    "a 1 MiB string": '{"ordered_ids": "' + "x" * MiB,
    "many small objects": '{"a": 1}' * (MiB // 8),
    "many small objects then the key": '{"a": 1}' * (MiB // 8) + ' "ordered_ids"',
    "many half objects": '{"a":[1,' * (MiB // 8),
    "many broken escapes": '{"a":"\\u' * (MiB // 8),
    "objects nested past the stack": '{"a":' * (MiB // 5),
    "1 MiB of ids": json.dumps({"ordered_ids": [str(i) for i in range(MiB // 8)]}),
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_no_answer_up_to_the_cap_holds_a_row_for_long(shape: str) -> None:
    """Parsing takes seconds at most, not minutes, for any answer up to 1 MiB (0.001 to
    0.6 s of CPU on this project's shared 2-core machine; the quadratic search took
    minutes on some). A hang guard: bench/ measures the speed."""
    text = SHAPES[shape]
    for parse in (lambda: parse_ranking(text, ["a", "b"]), lambda: parse_rewrite(text)):
        started = time.process_time()
        try:
            parse()
        except AnswerError:
            pass
        assert time.process_time() - started < 2


def test_a_ranking_with_many_ids_says_which_briefly() -> None:
    answer = json.dumps({"ordered_ids": [f"x{i}" for i in range(50_000)] + ["a", "a"]})
    with pytest.raises(AnswerError) as caught:
        parse_ranking(answer, ["a", "b"])
    assert str(caught.value) == (
        "ranking is not a permutation of the candidates (missing ids: b; extra ids: x0, x1, x2, x3, x4, x5, x6, "
        "x7, x8, x9 and 49,990 more; repeated ids: a)")


# --- rankings and the answer size cap ----------------------------------------------------------


@pytest.mark.parametrize(("ids", "problem"), [
    (["a", "a", "b", "c"], "repeated ids: a"),  # every candidate named, one twice
    (["c", "b", "a", "b", "c"], "repeated ids: b, c"),
    (["a", "a", "b"], "missing ids: c; repeated ids: a"),
])
def test_a_ranking_that_repeats_an_id_is_refused_naming_it(ids: list[str], problem: str) -> None:
    with pytest.raises(AnswerError) as refused:
        parse_ranking(json.dumps({"ordered_ids": ids}), ["a", "b", "c"])
    assert str(refused.value) == f"ranking is not a permutation of the candidates ({problem})"


def test_an_answer_of_exactly_the_size_cap_is_used_and_one_character_more_is_not() -> None:
    cap = 1 << 20  # 1 MiB of characters
    answers.check_answer("rewriter", ChatResponse(text="x" * cap), None, "--geo-max-output-tokens")
    assert answers.kept_answer("x" * cap) == "x" * cap
    with pytest.raises(UnusableAnswer) as refused:
        answers.check_answer("rewriter", ChatResponse(text="x" * (cap + 1)), None, "--geo-max-output-tokens")
    assert str(refused.value) == ("rewriter answer of 1,048,577 characters is over the answer size cap "
                                  "(1,048,576 characters): not used")
    assert answers.kept_answer("x" * (cap + 1)).endswith("[answer cut here in this report: 1,048,577 characters in all]")
