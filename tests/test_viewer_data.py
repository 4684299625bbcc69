"""The HTML viewer's data: word diffs that rebuild both texts, strings stored once, and
JSON that cannot end its <script> element."""

from __future__ import annotations

import json

import pytest

from pytest_geo.report.viewer_data import ADDED, REMOVED, SAME, script_json, viewer_data, word_diff

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("before", "after"), [
    ("Steel, 1.7 litres.", "Top match. Steel kettle, 1.7 litres!"),
    ("", "all new"), ("all gone", ""), ("same  text\n", "same  text\n"), ("a <b> & c", "a <i> & c"),
])
def test_word_diff_rebuilds_both_sides(before: str, after: str) -> None:
    parts = word_diff(before, after)
    assert "".join(t for op, t in parts if op in (SAME, REMOVED)) == before
    assert "".join(t for op, t in parts if op in (SAME, ADDED)) == after
    assert all(a[0] != b[0] for a, b in zip(parts, parts[1:], strict=False))  # neighbours merged


def test_word_diff_marks_whole_words() -> None:
    parts = word_diff("A steel kettle, 1.7 litres.", "A steel kettle, 1.8 litres.")
    assert [t for op, t in parts if op == REMOVED] == ["7"] and [t for op, t in parts if op == ADDED] == ["8"]
    parts = word_diff("quick fox", "quickest fox")
    assert [t for op, t in parts if op != SAME] == ["quick", "quickest"]


def test_shared_prompts_are_stored_once_and_script_json_is_inert() -> None:
    call = {"step": "rank_before", "role": "ranker", "model": "m", "attempt": 0, "cached": True,
            "messages": [{"role": "system", "content": "SYSTEM"}, {"role": "user", "content": "</script><!--"}],
            "answer": "{}"}
    rows = [{"kind": "geo", "nodeid": f"r{i}", "calls": [call, {**call, "step": "rank_after"}]} for i in range(3)]
    table, transcripts = viewer_data(rows)
    assert sorted(transcripts["strings"]) == sorted(["SYSTEM", "</script><!--", "{}"])
    assert [r["calls"] for r in table["rows"]] == [2, 2, 2]
    text = script_json(transcripts)
    assert "<" not in text and json.loads(text) == transcripts
