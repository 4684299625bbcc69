"""The HTML viewer's data: one small entry per row (read at page load) and the rows'
transcripts (read on the first expand), both plain JSON the page's script renders with
`textContent` only, so nothing from a dataset or a model is ever parsed as HTML.

Transcripts are most of a report's size, and most of their text repeats (the system
prompts in every call, the same ranking prompt in every repeat): each distinct string is
stored once in a table and calls refer to it by index."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from difflib import SequenceMatcher
from typing import Any

from pytest_geo.report.numbers import column_decimals
from pytest_geo.report.transcripts import with_transcript

# Words, runs of white space, and single other characters: joined back they give the
# text exactly, so both sides of a diff render as they were written.
TOKEN = re.compile(r"\w+|\s+|[^\w\s]")
SAME, REMOVED, ADDED = 0, -1, 1
PAGE_ROWS = 200  # rows put in the table at first; "show more" adds as many again


def word_diff(before: str, after: str) -> list[list[Any]]:
    """[[op, text], ...] with op SAME, REMOVED (only in `before`) or ADDED (only in
    `after`); the SAME and REMOVED parts join to `before`, SAME and ADDED to `after`."""
    a, b = TOKEN.findall(before), TOKEN.findall(after)
    parts: list[list[Any]] = []

    def add(op: int, tokens: Sequence[str]) -> None:
        if not tokens:
            return
        if parts and parts[-1][0] == op:
            parts[-1][1] += "".join(tokens)
        else:
            parts.append([op, "".join(tokens)])

    for tag, i1, i2, j1, j2 in SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            add(SAME, a[i1:i2])
        else:
            add(REMOVED, a[i1:i2])
            add(ADDED, b[j1:j2])
    return parts


class StringTable:
    """Each distinct string once; `ref` gives its index."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {}
        self.items: list[str] = []

    def ref(self, text: str) -> int:
        found = self.index.get(text)
        if found is None:
            found = self.index[text] = len(self.items)
            self.items.append(text)
        return found


def _call_view(call: Mapping[str, Any], strings: StringTable) -> dict[str, Any]:
    answer = call.get("answer")
    return {
        "step": call.get("step", ""), "role": call.get("role", ""), "model": call.get("model", ""),
        "attempt": call.get("attempt", 0), "cached": bool(call.get("cached")),
        "messages": [[str(m.get("role", "")), strings.ref(str(m.get("content", "")))]
                     for m in call.get("messages", [])],
        "answer": None if answer is None else strings.ref(str(answer)),
        "error": call.get("error"),
        **({"judge": call["judge"]} if call.get("judge") else {}),
    }


def transcript_view(record: Mapping[str, Any], strings: StringTable) -> dict[str, Any] | None:
    """A row's calls, or per repeat its order, ranks and calls; None without either."""
    if record.get("repeats"):
        return {"repeats": [
            {"repeat": r.get("repeat", i), "order": r.get("order", []), "before": r.get("rank_before"),
             "after": r.get("rank_after"), "delta": r.get("rank_improvement"), "error": r.get("error"),
             "rewritten": r.get("rewritten_description"),
             "calls": [_call_view(c, strings) for c in r.get("calls", [])]}
            for i, r in enumerate(record["repeats"])
        ]}
    if record.get("calls"):
        return {"calls": [_call_view(c, strings) for c in record["calls"]]}
    return None


def _count_calls(record: Mapping[str, Any]) -> int:
    if "n_calls" in record:  # the calls are in the transcripts file (report/transcripts.py)
        return int(record["n_calls"])
    if record.get("repeats"):
        return sum(len(r.get("calls", [])) for r in record["repeats"])
    return len(record.get("calls", []))


def row_view(index: int, record: Mapping[str, Any]) -> dict[str, Any]:
    geo = record.get("kind") == "geo"
    view: dict[str, Any] = {
        "i": index, "kind": record.get("kind"), "suite": record.get("suite", ""), "id": record.get("nodeid", ""),
        "target": record.get("target_id") or "",
        "query": (record.get("query") if geo else record.get("input")) or "",
        "before": record.get("rank_before"), "after": record.get("rank_after"),
        "delta": record.get("rank_improvement"), "score": record.get("score"),
        "feedback": record.get("feedback", ""), "error": record.get("error"), "calls": _count_calls(record),
    }
    original, rewritten = record.get("original_description"), record.get("rewritten_description")
    if geo and original is not None and rewritten is not None:
        view["diff"] = word_diff(str(original), str(rewritten))
    else:  # no rewrite (the row erred first), or a report from before originals were kept
        view["original"], view["rewritten"] = original or "", rewritten or ""
    if record.get("repeats"):
        view["repeats"] = len(record["repeats"])
    if record.get("judges"):  # each judge's ranks and its ranking of the originals, for the transcript
        view["judges"] = [[name, c.get("rank_before"), c.get("rank_after"), c.get("rank_improvement"),
                           c.get("error"), c.get("order_before") or []] for name, c in record["judges"].items()]
    return view


def decimals_of(rows: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Each number column's decimals, one per column (numbers.column_decimals)."""
    def decimals(key: str, places: int) -> int:
        return column_decimals([r.get(key) for r in rows], places)

    return {"before": decimals("rank_before", 2), "after": decimals("rank_after", 2),
            "delta": decimals("rank_improvement", 2), "score": decimals("score", 4)}


def transcript_views(rows: Sequence[Mapping[str, Any]], lines: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The transcripts the page embeds, keyed by row index: every row's calls held on the
    rows themselves, or with `lines` (node id -> a transcripts file line's JSON text)
    those rows only, each line parsed only while its view is built."""
    strings = StringTable()
    views: dict[str, Any] = {}
    for i, record in enumerate(rows):
        if lines is not None:
            line = lines.get(str(record.get("nodeid")))
            if line is None:
                continue
            record = with_transcript(record, json.loads(line))
        view = transcript_view(record, strings)
        if view is not None:
            views[str(i)] = view
    return {"strings": strings.items, "rows": views}


def viewer_data(rows: Sequence[Mapping[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the rows' entries with each number column's decimals, the transcripts), for rows
    that still hold their calls; the report writes the same pieces streamed (html.py)."""
    table = {"rows": [row_view(i, r) for i, r in enumerate(rows)], "page": PAGE_ROWS, "decimals": decimals_of(rows)}
    return table, transcript_views(rows)


def script_json(data: Any) -> str:
    """JSON to sit inside <script type="application/json">: '<' is written \\u003c, so
    no '</script>' or '<!--' in the data can end or change the element."""
    return json.dumps(data, ensure_ascii=False, separators=(",", ":")).replace("<", "\\u003c")
