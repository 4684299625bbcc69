"""No new facts: the checker on its own, then every rewrite of a run checked end to end."""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import copy_prompts
from pytest_geo.engine.facts import (
    _CUR_WORD,
    _NUM,
    _SEP,
    _UNIT,
    CLAIM_MARKS,
    CLAIM_PATTERN,
    MAX_MATCH,
    NUMBER_WORDS,
    Fact,
    _facts_of,
    _matches,
    _Stated,
    extract_facts,
    new_facts,
)

REPO = Path(__file__).resolve().parent.parent

LAPTOP = "Aero One 13\n13-inch ultrabook, 980g, 16GB RAM, 512GB SSD, $1,299.00, 30% lighter than the Aero 2."
HEADPHONES = "Sony WH-1000XM5\nNoise-cancelling headphones, 30 hours of battery, 1,5 kg case, 30 x 20 x 10 cm box."


@pytest.mark.unit
@pytest.mark.parametrize(("original", "rewrite", "expected"), [
    (LAPTOP, "Aero One 13 with 16GB RAM, 2 kg, 1TB SSD.", ["2 kg", "1TB"]),  # invented specs
    (LAPTOP, "Now only $999!", ["$999"]),  # invented price
    (LAPTOP, "Costs 1299 EUR.", ["1299 EUR"]),  # same number, other currency
    (LAPTOP, "Up to 45% lighter.", ["45%"]),
    (LAPTOP, "ISO 9001 made, CE certified, best-selling.", ["ISO 9001", "CE", "certified", "best-selling"]),
    (LAPTOP, "Pairs with the WH-1000XM5 and the X100.", ["WH-1000XM5", "X100"]),  # model numbers
    (LAPTOP, "Backed by a 3-year warranty, three colours.", ["3-year", "three"]),
    (HEADPHONES, "Battery lasts 40 hours; 1,5 kg case.", ["40 hours"]),
    (HEADPHONES, "Box is 30 x 25 x 10 cm.", ["30 x 25 x 10 cm"]),
])
def test_invented_facts_are_reported_as_written(original: str, rewrite: str, expected: list[str]) -> None:
    assert new_facts(original, rewrite) == expected


@pytest.mark.unit
@pytest.mark.parametrize(("original", "rewrite"), [
    # reorder and reformat: spacing, case, separators, currency forms, units of one kind
    (LAPTOP, "512 GB SSD and 16 gb RAM in a 13 inch ultrabook weighing 980 g (0.98 kg), for $1299."),
    (LAPTOP, "At 1299 USD, 30 percent lighter than the Aero 2: the Aero One 13."),
    (LAPTOP, "Top match for your search. 13-inch ultrabook, 980g, 16GB RAM, 512GB SSD."),
    (LAPTOP, "16GB of RAM, 512 GB of storage, about 2.2 lb."),
    (HEADPHONES, "The wh1000xm5 (XM5): 30-hour battery, 1.5kg case, box 30cm x 20cm x 10cm."),
    (HEADPHONES, "Sony WH-1000XM5, a 1,5 kg case and 30 hrs of listening."),
    ("2-year warranty, 20-30 minutes runtime, 1,000 reviews", "Two years of warranty, 20 to 30 min, 1000 reviews."),
    ("Whisper V8\nStick cleaner, 62 dB, 0.5 L bin.", "The Whisper V8 stick cleaner: quiet at 62 dB with a 0.5 l bin."),
])
def test_faithful_rewrites_raise_no_false_alarm(original: str, rewrite: str) -> None:
    assert new_facts(original, rewrite) == []


@pytest.mark.unit
def test_a_rewrite_may_drop_facts() -> None:
    assert new_facts(LAPTOP, "A light ultrabook.") == []


@pytest.mark.unit
def test_each_new_fact_is_reported_once() -> None:
    assert new_facts("a kettle", "2 kg, 2kg, 2 KG and $5 or $5.00") == ["2 kg", "$5"]


@pytest.mark.unit
def test_extraction_normalises_values_and_units() -> None:
    facts = {(f.kind, f.value, f.unit) for f in extract_facts("1,000 mAh, 1,5 KG, $1,299.50, 45 per cent, X-100")}
    assert facts == {
        ("quantity", 1000, "mah"), ("quantity", 1.5, "kg"), ("price", 1299.5, "USD"),
        ("percent", 45, "%"), ("model", None, "X100"),
    }


@pytest.mark.unit
def test_a_comma_list_is_not_a_decimal() -> None:
    assert new_facts("sizes 1,2", "sizes 1, 2 and 3") == ["3"]


# --- every rewrite of a run is checked -------------------------------------------------

ROW = {
    "query": "light laptop",
    "target_id": "t",
    "candidates": [
        {"id": "a", "title": "Desk 15", "description": "15-inch desk laptop, 1.8kg."},
        {"id": "t", "title": "Aero One 13", "description": "13-inch ultrabook, 980g, 16GB RAM."},
    ],
}
REWRITES = {
    "honest": "16 GB RAM, 980 g: a 13 inch ultrabook.",
    "specs": "13-inch ultrabook, only 0.9 kg, 32GB RAM.",
    "price": "13-inch ultrabook, 980g, 16GB RAM, yours for $99.",
    "certified": "CE certified 13-inch ultrabook, 980g, 16GB RAM.",
}
# The seam: pytest-geo's `pytest_geo_make_client` hook, from a conftest in the test project.
REWRITER_CONFTEST = f'''
import json
from pytest_geo.llm.base import ChatResponse
from pytest_geo.llm.mock import MockClient

REWRITES = {REWRITES!r}

class Rewriter(MockClient):
    """The mock ranker; a rewriter that answers the row's canned rewrite."""
    async def complete(self, request):
        if request.role == "rewriter":
            qid = request.messages[1]["content"].split("QID=")[1].split()[0]
            return ChatResponse(json.dumps({{"rewritten_description": REWRITES[qid]}}))
        return await super().complete(request)

def pytest_geo_make_client(config, settings):
    return Rewriter()
'''


@pytest.fixture
def rewriter_project(pytester: pytest.Pytester) -> pytest.Pytester:
    copy_prompts(pytester.path / "prompts")
    user = pytester.path / "prompts" / "rewriter_user.txt"
    user.write_text("QID={{query_id}}\n" + user.read_text())
    pytester.makeconftest(REWRITER_CONFTEST)
    pytester.makefile(".jsonl", rows="\n".join(json.dumps({**ROW, "query_id": q}) for q in REWRITES) + "\n")
    return pytester


@pytest.mark.plugin
def test_violations_go_to_feedback_report_and_summary(rewriter_project: pytest.Pytester) -> None:
    result = rewriter_project.runpytest("rows.jsonl", "--geo-mock", "--geo-report", "report.json")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["new facts: fact_violation_rate=0.7500 (3 of 4 rewrites add facts not in the original)"])
    report = json.loads((rewriter_project.path / "report.json").read_text())
    rows = {r["query_id"]: r for r in report["rows"]}
    assert {q: r["fact_violations"] for q, r in rows.items()} == {
        "honest": [], "specs": ["0.9 kg", "32GB"], "price": ["$99"], "certified": ["CE", "certified"],
    }
    # the mock ranks the longer description first, and "t" is longer before and after
    assert rows["specs"]["feedback"] == "rank 1 -> 1; new facts: 0.9 kg, 32GB"
    assert rows["honest"]["feedback"] == "rank 1 -> 1"
    assert report["geo"]["fact_violation_rate"] == 0.75


@pytest.mark.plugin
@pytest.mark.parametrize("how", [["--geo-strict-facts"], ["-o", "geo_strict_facts=true"]])
def test_strict_facts_scores_zero_and_fails_the_item(rewriter_project: pytest.Pytester, how: list[str]) -> None:
    result = rewriter_project.runpytest("rows.jsonl", "--geo-mock", "--geo-report", "report.json", *how)
    result.assert_outcomes(passed=1, failed=3)
    result.stdout.fnmatch_lines([
        "rows.jsonl:2: error: new facts not in the original: 0.9 kg, 32GB (--geo-strict-facts)",
        "rows.jsonl:3: error: new facts not in the original: $99 (--geo-strict-facts)",
    ])
    result.stdout.no_fnmatch_line("*Traceback*")
    report = json.loads((rewriter_project.path / "report.json").read_text())
    assert [r["score"] for r in report["rows"]] == [0.0, 0.0, 0.0, 0.0]
    assert report["rows"][1]["fact_violations"] == ["0.9 kg", "32GB"]


@pytest.mark.plugin
def test_mock_smoke_rewrites_add_no_facts(pytester: pytest.Pytester) -> None:
    copy_prompts(pytester.path / "prompts")
    shutil.copy(REPO / "eval" / "datasets" / "geo_smoke.jsonl", pytester.path / "smoke.jsonl")
    result = pytester.runpytest("smoke.jsonl", "--geo-mock", "--geo-strict-facts")
    result.assert_outcomes(passed=8)
    result.stdout.fnmatch_lines(["new facts: fact_violation_rate=0.0000 (0 of 8 rewrites*"])


@pytest.mark.plugin
@pytest.mark.parametrize("repeats", ["1", "2", "3"])
def test_repeats_keep_the_fact_check(rewriter_project: pytest.Pytester, repeats: str) -> None:
    result = rewriter_project.runpytest("rows.jsonl", "--geo-mock", "--geo-report", "report.json",
                                        "--geo-repeats", repeats)
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["new facts: fact_violation_rate=0.7500 (3 of 4 rewrites add facts not in the original)"])
    report = json.loads((rewriter_project.path / "report.json").read_text())
    rows = {r["query_id"]: r for r in report["rows"]}
    assert rows["specs"]["fact_violations"] == ["0.9 kg", "32GB"]
    assert report["geo"]["fact_violation_rate"] == 0.75
    assert rows["price"]["feedback"].endswith("new facts: $99")


# --- adversarial text: linear time (bench/bench_facts.py measures it; the timeout here
# only stops a hang, as the old quadratic patterns took 77 s on 60 KB)

ADVERSARIAL_UNITS = ["a-", "1-", "1.", "a.", "1,", "1,111", "1", "a", "1 x ", "a1-", "$1 ", "ISO 1-", "1 kg ", " ",
                     "WH-1000XM5 ", "two ", "CE ", "1st ", "30 per cent "]


@pytest.mark.unit
@settings(max_examples=20, deadline=None)
@given(units=st.lists(st.sampled_from(ADVERSARIAL_UNITS), min_size=1, max_size=3),
       repeat=st.integers(min_value=1, max_value=20_000), noise=st.text(max_size=40))
def test_adversarial_text_is_checked_without_a_hang(units: list[str], repeat: int, noise: str) -> None:
    text = ("".join(units) * repeat)[:60_000] + noise
    start = time.perf_counter()
    assert set(new_facts(text, text)) == set()  # a text states every fact it holds
    new_facts("a kettle", text)
    assert time.perf_counter() - start < 30, "hang guard: the bench measures speed"


# The fact pattern as first written: the alternatives in order, one after the other, each
# reading its own number. facts.PATTERN is laid out for speed; it must match the same.
PLAIN_PATTERN = re.compile(
    rf"""
    (?P<price>(?:US\$|[$€£¥])\s?{_NUM}|\b(?:USD|EUR|GBP)\s?{_NUM}|\b{_NUM}\s?(?:{_CUR_WORD})\b|\b{_NUM}\s?[€£])
    |(?P<standard>\b(?:ISO|IEC|EN|IEEE|ANSI|ASTM|IP)\s?\d{{1,12}}(?:[-:.]\d{{1,12}}){{0,4}})
    |(?P<quantity>\b{_NUM}(?:{_SEP}{_NUM}){{0,2}}\s?-?\s?(?:{_UNIT}))
    |(?P<ordinal>\b\d{{1,24}}(?:st|nd|rd|th)\b)
    |(?P<model>\b(?=[A-Za-z\d])(?=(?:\d{{0,24}}[-.]){{0,5}}\d{{0,24}}[A-Za-z])(?=(?:[A-Za-z]{{0,24}}[-.]){{0,5}}[A-Za-z]{{0,24}}\d)[A-Za-z\d]{{1,24}}(?:[-.][A-Za-z\d]{{1,24}}){{0,5}}\b)
    |(?P<number>(?<![\w.]){_NUM}(?!\w))
    |(?P<word>\b(?:{"|".join(NUMBER_WORDS)})\b)
    |(?P<mark>\b(?:{"|".join(CLAIM_MARKS)})\b)
    """,
    re.VERBOSE | re.IGNORECASE,
)


def plain_facts(text: str) -> list[Fact]:
    """The facts of every match of the plain pattern over the whole text."""
    return [f for m in PLAIN_PATTERN.finditer(text) for f in _facts_of(m.lastgroup or "", m.group())]


PIECES = [*"a1 -.,x$€£¥kgCE2TWOtwo ISO%\n\t_\"°", " per cent", "RoHS", "TÜV", " kg", " x ", "USD", "US$", "eur", "1st",
          "WH-1000XM5", "IP", "by", "to", "mAh",
          "K", "ſ", "İ", "sİx", "²", "٣",  # case folding beyond ASCII, digits beyond ASCII
          "1" * 30, "1-" * 300, "1." * 300, "1," * 300, "1,000," * 100, " 1" * 300, "1.1 " * 200]  # hand-overs


@pytest.mark.unit
@settings(max_examples=150, deadline=None)
@given(text=st.lists(st.sampled_from(PIECES), max_size=40).map("".join))
def test_the_window_scan_finds_what_the_plain_pattern_finds_in_the_whole_text(text: str) -> None:
    assert [f for kind, written in _matches(text) for f in _facts_of(kind, written)] == plain_facts(text)


@pytest.mark.unit
@pytest.mark.parametrize("text", [
    # a quantity whose first letter is its unit, three long numbers in: the hand-over back
    # to PATTERN must come more than a match's length before the letter
    "-" * 900 + " - ".join(["1,000,000,000,000,000,000,000.123456789012"] * 3) + " kg",
    # a number covering the first position where only numbers can start, then no match
    # for a stretch: the hand-over must be a position the whole-text scan tries
    "a" + " " * (MAX_MATCH - 2) + "1,000,000" + ".1" * 1000,
    # no safe place to cut the numbers short: `1.5,2,_` read up to its second comma is `1.5,2`
    "-" * 900 + ",1.5,2,_" * 100 + "a",
])
def test_the_hand_over_points_keep_the_whole_text_reading(text: str) -> None:
    assert [f for kind, written in _matches(text) for f in _facts_of(kind, written)] == plain_facts(text)


def plain_new_facts(original: str, rewrite: str) -> list[str]:
    """The check as first written: every fact of both texts read with the plain pattern
    over the whole text, every fact of the rewrite looked up."""
    def facts(text: str) -> list[Fact]:
        return plain_facts(text) + [f for m in CLAIM_PATTERN.finditer(text) for f in _facts_of("claim", m.group())]
    stated = _Stated.of(facts(original))
    reported: list[str] = []
    seen: set[tuple[str, object, str]] = set()
    for fact in facts(rewrite):
        if (fact.kind, fact.value, fact.unit) not in seen:
            seen.add((fact.kind, fact.value, fact.unit))
            if not stated.supports(fact):
                reported.append(fact.text)
    return reported


FACT_PIECES = ["a", "1", " ", "-", ".", ",", "x", "$", "kg", "KG", " kg", "lb", "2", "16GB", "16 gb", "WH-1000XM5", "XM5",
               "1000XM", "X100", "V2.1", "2.1", "21", "ISO 9001", "CE", "certified", "award-winning", "three", "1,000",
               "1,5", "1.5", "$199", "199 USD", "$199.00", "30 x 20 cm", "2-year", "2 years", "980 g", "0.98 kg", "45%",
               "45 per cent", "1st", "\n", "sİx", "ſ"]


@pytest.mark.unit
@settings(max_examples=300, deadline=None)
@given(original=st.lists(st.sampled_from(FACT_PIECES), max_size=12).map("".join),
       rewrite=st.lists(st.sampled_from(FACT_PIECES), max_size=12).map("".join))
def test_the_checker_reports_what_the_plain_check_reports(original: str, rewrite: str) -> None:
    # the windows, the hand-overs, the forms read once, the lazy model index change nothing
    assert new_facts(original, rewrite) == plain_new_facts(original, rewrite)


@pytest.mark.unit
@pytest.mark.parametrize(("original", "rewrite"), [
    ("KG30 kettle", "KG..3"),  # a model number of one part (`KG`, the body stops at `..`)
    ("sİx1.5lb45", "sİx1.5"),  # a model number with a letter `re` folds beyond ASCII
])
def test_a_shorter_model_number_is_found_among_the_stated_ones_part_by_part(original: str, rewrite: str) -> None:
    assert new_facts(original, rewrite) == []


@pytest.mark.unit
def test_a_letter_that_folds_to_a_number_word_is_no_number() -> None:
    assert new_facts("a", "1 sİx") == ["1"]  # raised KeyError: 'si̇x' is not a number word


@pytest.mark.unit
@pytest.mark.parametrize(("rewrite", "expected"), [
    # ASCII in any case: found through the lowered text's substring look
    ("CeRtIfIeD, Best Seller, TWELVE, ce, CE", ["TWELVE", "CE", "CeRtIfIeD", "Best Seller"]),
    # `re` folds `ı` to `i` and `ſ` to `s`, which lowering does not: beyond ASCII the scans run
    ("certıfıed and beſt-selling", ["certıfıed", "beſt-selling"]),
    ("ſix kettles", []),  # number words fold as ASCII only (`ſ` is no `s` there)
])
def test_claim_words_number_words_and_marks_are_found_as_re_folds_them(rewrite: str, expected: list[str]) -> None:
    assert new_facts("a kettle", rewrite) == expected
