"""The hot paths made cheaper for large datasets keep their exact behaviour."""

from __future__ import annotations

import asyncio
import copy
import functools
import json
import threading
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import PROMPTS, geo_rows
from pytest_geo.data.dataset import (
    Candidate,
    DuplicateKey,
    GeoRow,
    PackedRow,
    _loads_row,
    _plain_texts,
    _validator,
    iter_dataset,
    iter_packed,
)
from pytest_geo.engine.experiment import candidate_values
from pytest_geo.engine.runner import Runner
from pytest_geo.engine.session import GeoSession
from pytest_geo.llm.mock import MockClient
from pytest_geo.llm.stack import build_stack
from pytest_geo.pytest_layer.lookahead import RunLookahead
from pytest_geo.settings import Settings

GOOD = {
    "query": "q", "query_id": "r1", "target_id": "a",
    "candidates": [{"id": "a", "title": "A", "description": "x"}, {"id": "b", "title": "", "description": ""}],
}


@pytest.mark.unit
def test_candidate_renderings_match_json_dumps() -> None:
    candidates = (Candidate("a", 'Q "x" \\ é 中', "line\nbreak\ttab \u2028 \x01"), Candidate("b", "", "</script>"))
    for chosen in (candidates, candidates[:1], ()):
        listed = [c.as_dict() for c in chosen]
        values = candidate_values("q", None, chosen)
        assert values["candidates_json"] == json.dumps(listed, ensure_ascii=False, indent=2)
        assert values["candidates_jsonl"] == "\n".join(
            json.dumps(c, ensure_ascii=False) for c in listed)


def _variants() -> list[object]:
    """The good row with one thing broken at a time (and some that stay valid)."""
    out: list[object] = [GOOD, [], "row", None]
    for key in ("query", "query_id", "id", "target_id", "candidates"):
        for bad in (None, "", 3, True, [], {}, "ok"):
            row = copy.deepcopy(GOOD)
            row[key] = bad
            out.append(row)
        row = copy.deepcopy(GOOD)
        row.pop(key, None)
        out.append(row)
    for field in ("id", "title", "description"):
        for bad in (None, "", 3, ["x"]):
            row = copy.deepcopy(GOOD)
            row["candidates"][0][field] = bad
            out.append(row)
        row = copy.deepcopy(GOOD)
        del row["candidates"][1][field]
        out.append(row)
    for padded in (" a", "a ", "\ta"):
        row = copy.deepcopy(GOOD)
        row["candidates"][1]["id"] = padded
        out.append(row)
    row = copy.deepcopy(GOOD)
    row["candidates"] = row["candidates"][:1]
    out += [row, {**GOOD, "candidates": [*GOOD["candidates"], "c"]}, {**GOOD, "extra": 1},
            {**GOOD, "candidates": [*GOOD["candidates"], ["a", "A", "x"]]}, {**GOOD, "candidates": [{}, {}]}]
    return out


@pytest.mark.unit
@pytest.mark.parametrize("obj", _variants())
def test_fast_row_check_agrees_with_the_schema(obj: object) -> None:
    assert (_plain_texts(obj) is not None) == _validator().is_valid(obj)


@pytest.mark.unit
def test_fast_row_check_reads_the_candidates_texts() -> None:
    assert _plain_texts(GOOD) == ("a", "A", "x", "b", "", "")
    extra = {**GOOD, "candidates": [{"price": 3, **c, "url": "u"} for c in GOOD["candidates"]]}
    assert _plain_texts(extra) == ("a", "A", "x", "b", "", "")


@pytest.mark.unit
def test_batched_submission_results_errors_and_cancellation() -> None:
    runner = Runner(concurrency=1)
    started: list[int] = []
    release = threading.Event()

    async def job(i: int) -> int:
        started.append(i)
        while not release.is_set():
            await asyncio.sleep(0.001)
        if i == 1:
            raise ValueError("row 1 failed")
        return i * 10

    try:
        futures = runner.submit_many([functools.partial(job, i) for i in range(5)])
        while not started:
            time.sleep(0.001)
        assert runner.cancel_pending() == 5  # nothing has finished yet
        assert all(f.cancelled() for f in futures)
        release.set()
        time.sleep(0.05)
        assert started == [0]  # the waiting rows never started
        again = runner.submit_many([functools.partial(job, i) for i in (1, 2)])
        with pytest.raises(ValueError, match="row 1 failed"):
            again[0].result(timeout=5)
        assert again[1].result(timeout=5) == 20
    finally:
        release.set()
        runner.close()


@pytest.mark.unit
def test_a_packed_row_reads_back_as_the_same_row(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text("\n".join(json.dumps(row) for row in (
        {"query": "théière 中", "candidates": [{"id": "a", "title": "", "description": "x\ny"},
                                             {"id": "b", "title": "B", "description": ""}]},  # target drawn
        {"query_id": "q2", "query": "q", "target_id": "b",
         "candidates": [{"id": "a", "title": "A", "description": "a"}, {"id": "b", "title": "B", "description": "b"}]},
    )) + "\n")
    rows = [row for row in iter_dataset(path, 7, display="shown.jsonl") if isinstance(row, GeoRow)]
    for row in (*rows, replace(rows[1], variant="short")):
        assert PackedRow.of(row).row() == row
    assert rows[0].target_was_chosen and rows[0].query_id is None and rows[0].path == "shown.jsonl"
    # collection keeps each line's bytes and the target drawn for it: read back, the same rows
    packed = list(iter_packed(path, 7, display="shown.jsonl"))
    assert [p.row() for p in packed if isinstance(p, PackedRow)] == rows
    assert [(p.line, p.query_id) for p in packed] == [(1, None), (2, "q2")]
    assert packed[0].text == path.read_bytes().splitlines()[0]
    assert packed[1]._replace(variant="short").row() == replace(rows[1], variant="short")


@pytest.mark.unit
def test_a_packed_line_with_a_byte_order_mark_reads_back(tmp_path: Path) -> None:
    """Files joined with `cat` carry a BOM at the start of a later line: kept in the
    packed bytes, it is read back past, as when the line was checked."""
    line = '{"query": "q", "candidates": [{"id": "a", "title": "A", "description": "x"}, ' \
           '{"id": "b", "title": "B", "description": "y"}]}'
    path = tmp_path / "d.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + line.encode() + b"\n\xef\xbb\xbf" + line.encode() + b"\n")
    rows = list(iter_dataset(path, 3))
    packed = list(iter_packed(path, 3))
    assert [p.row() for p in packed if isinstance(p, PackedRow)] == rows and len(rows) == 2


RUN_AGAIN_CONFTEST = '''
import json
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

AGAIN = []

@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    yield
    first = item.geo_record
    item.runtest()  # as a rerun plugin does, once the item has packed its row
    AGAIN.append([first["query"], item.geo_record["query"], item.geo_record["target_id"],
                  item.geo_record["rank_before"], item.geo_record["rank_after"]])

def pytest_sessionfinish(session):
    (session.config.rootpath / "again.json").write_text(json.dumps(AGAIN))
'''


@pytest.mark.plugin
def test_an_item_run_again_runs_its_row_again(geo_project: pytest.Pytester) -> None:
    geo_project.makeconftest(RUN_AGAIN_CONFTEST)
    geo_project.runpytest("data/smoke.jsonl", "--geo-mock").assert_outcomes(passed=8)
    again = json.loads((geo_project.path / "again.json").read_text())
    assert len(again) == 8
    assert again[0] == ["best lightweight laptop for travel under 1kg"] * 2 + ["p1", 3, 1]


@pytest.mark.unit
def test_rows_are_scheduled_a_window_ahead_of_the_running_item(tmp_path: Path) -> None:
    settings = Settings(prompts_dir=PROMPTS, concurrency=1)
    geo = GeoSession(settings, build_stack(settings, MockClient()))
    geo.runner.window_floor = 2  # a window of 4 rows (4 per slot): 8 scheduled ahead
    items = [SimpleNamespace(row=row, session=SimpleNamespace(shouldfail=False, shouldstop=False))
             for row in _rows(tmp_path, 20)]

    def scheduled() -> list[int]:
        return [n for n, item in enumerate(items) if geo.scheduled(item.row) is not None]

    try:
        lookahead = RunLookahead(geo, items)  # type: ignore[arg-type]
        assert scheduled() == list(range(8))
        for item in items[:4]:
            lookahead.before(item)  # type: ignore[arg-type]
        assert scheduled() == list(range(8))  # 4 still ahead of the cursor: no top-up yet
        lookahead.before(items[12])  # type: ignore[arg-type]  # out of order: moves nothing
        lookahead.before(items[4])  # type: ignore[arg-type]
        assert scheduled() == list(range(13))  # 3 ahead (< 4): topped up to 8 ahead of the cursor
        for item in items[5:]:
            lookahead.before(item)  # type: ignore[arg-type]
        assert scheduled() == list(range(20))
    finally:
        geo.close()


def _rows(directory: Path, n: int) -> list[GeoRow]:
    path = directory / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in geo_rows(n)), encoding="utf-8")
    return [row for row in iter_dataset(path, 0) if isinstance(row, GeoRow)]


WINDOW_CONFTEST = '''
import json
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
import pytest_geo.engine.runner as runner
from pytest_geo.pytest_layer.state import running_session

runner.WINDOW_FLOOR = 2  # with --geo-concurrency 1: a window of 4 rows, 8 scheduled ahead
MOST = [0]
PARSED = [0]  # rows held parsed

@pytest.hookimpl(trylast=True)
def pytest_runtest_call(item):
    PARSED[0] = max(PARSED[0], sum(1 for i in item.session.items if i.row_not_run is not None))
    geo = running_session(item.config)
    MOST[0] = max(MOST[0], sum(1 for i in item.session.items if geo.scheduled(i.read_row()) is not None))

def pytest_sessionfinish(session):
    (session.config.rootpath / "most.json").write_text(json.dumps([MOST[0], PARSED[0]]))
'''


@pytest.mark.plugin
def test_a_run_longer_than_the_lookahead_runs_every_row(geo_project: pytest.Pytester) -> None:
    geo_project.makeconftest(WINDOW_CONFTEST)
    (geo_project.path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in geo_rows(30)))
    result = geo_project.runpytest("rows.jsonl", "--geo-mock", "--geo-concurrency", "1", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=30)
    result.stdout.fnmatch_lines(["rows.jsonl: n=30 avg_rank_improvement=*"])
    most, parsed = json.loads((geo_project.path / "most.json").read_text())
    # the running row and up to 8 ahead of it, never the 30 at once: scheduled, and held
    # parsed (a check at collection once parsed every row and kept it until it ran)
    assert 2 <= most <= 9
    assert 2 <= parsed <= 9


@pytest.mark.unit
def test_feedback_folds_repeats_counted_before_spaces_are_folded() -> None:
    from pytest_geo.report.results import fold_feedback

    # texts that differ only in spacing fold together, in the order their first spelling came
    texts = ["rank 3 -> 1", "rank  3 -> 1", "", "  ", "rank 2 -> 2", "rank 3 -> 1\n", "rank 2 -> 2"]
    assert fold_feedback(texts) == "rank 3 -> 1 (x3); rank 2 -> 2 (x2)"
    assert fold_feedback(iter(["b", "a", "b"])) == "b (x2); a"


@pytest.mark.unit
def test_a_geo_record_keeps_its_fields_and_their_order() -> None:
    from pytest_geo.data.record import geo_record

    row = GeoRow("d.jsonl", 4, "q", (Candidate("a", "A", "x"), Candidate("b", "B", "y")), "b", "r1", True)
    outcome = {"query_id": "r1", "target_id": "b", "score": 1.0, "feedback": "rank 2 -> 1", "error": None}
    record = geo_record(row, outcome, suite="s", split="train", nodeid="d.jsonl::r1", threshold=0.5)  # type: ignore[arg-type]
    assert list(record.items()) == [
        ("kind", "geo"), ("suite", "s"), ("metric", "rank_improvement"), ("split", "train"),
        ("nodeid", "d.jsonl::r1"), ("line", 4), ("threshold", 0.5), ("query_id", "r1"), ("target_id", "b"),
        ("score", 1.0), ("feedback", "rank 2 -> 1"), ("error", None), ("dataset", "d.jsonl"),
        ("target_was_chosen", True), ("query", "q"), ("original_description", "y")]
    variant = geo_record(replace(row, variant="v"), {}, suite="s[v]", split="train", nodeid="n")
    assert (variant["variant"], variant["variant_of"]) == ("v", "s")
    assert "threshold" not in variant  # no threshold: the report writes no null for it


VALID_LINES = [
    '{"query": "q", "target_id": "a", "candidates": [{"id": "a", "title": "A", "description": "x"}, '
    '{"id": "b", "title": "", "description": ""}]}',
    # spaces around colons, escaped quotes and other escapes, extra fields of every kind
    '{ "query" : "say \\"hi\\"\\n", "query_id":"r1", "n": 3, "candidates":[{"id":"a","title":"\\u00e9\\"",'
    '"description":"x:y", "url": "u", "price": 1.5},{"id":"b","title":"B","description":"","tags":null}]}',
    '{"query": "q", "meta": {"a": "x"}, "candidates": [{"id": "a", "title": "A", "description": "x"}, '
    '{"id": "b", "title": "", "description": "c:\\\\dir"}]}',  # strings nested elsewhere; an escaped backslash
    '{"query": "q", "candidates": [{"id": "a", "title": "A", "description": "x"}]}',  # not a valid row
]
REPEATED_LINES = [  # a key given twice, wherever it is, and however the line is spelled
    ('{"query": "q", "query": "r", "candidates": [{"id": "a", "title": "A", "description": "x"}, '
     '{"id": "b", "title": "", "description": ""}]}', "query"),
    ('{"query": "q", "candidates": [{"id": "a", "title": "A", "description": "x", "id": "c"}, '
     '{"id": "b", "title": "", "description": ""}]}', "id"),
    ('{"query": "q", "x": {"k": 1, "k": 2}, "candidates": [{"id": "a", "title": "A", "description": "x"}, '
     '{"id": "b", "title": "", "description": ""}]}', "k"),
    ('{"query": "q\\"", "candidates": [{"id": "a", "title": "A", "description": "x", "url": "1", "url": "2"}, '
     '{"id": "b", "title": "", "description": ""}]}', "url"),
    ('{"query": "q\\\\", "candidates": [{"id": "a", "title": "A", "description": "x"}, '
     '{"id": "b", "title": "", "description": "", "description": ""}]}', "description"),
]


@pytest.mark.unit
@pytest.mark.parametrize("line", VALID_LINES)
def test_a_line_decodes_as_json_loads_does(line: str) -> None:
    assert _loads_row(line) == json.loads(line)


@pytest.mark.unit
@pytest.mark.parametrize(("line", "key"), REPEATED_LINES)
def test_a_repeated_key_is_found_wherever_it_is(line: str, key: str) -> None:
    json.loads(line)  # valid JSON, which json.loads reads without a word
    with pytest.raises(DuplicateKey, match=f"^{key}$"):
        _loads_row(line)


_texts = st.text(st.sampled_from('ab "\\/:{},\n\u00e9'), max_size=6)


@st.composite
def _row_lines(draw: st.DrawFn) -> tuple[str, str | None]:
    """A row's JSON line, spelled by hand so a key can appear twice: candidates with extra
    fields, texts full of quotes and backslashes, and maybe one key repeated anywhere
    (returned beside the line)."""
    candidates = [[("id", draw(st.sampled_from(["a", "b", "c", "d"]))), ("title", draw(_texts)),
                   ("description", draw(_texts))] for _ in range(draw(st.integers(2, 3)))]
    for fields in candidates:
        fields.extend(draw(st.lists(st.tuples(st.sampled_from(["url", "tag"]),
                                              st.one_of(_texts, st.integers(0, 9))), max_size=1)))
    top: list[tuple[str, object]] = [("query", draw(_texts) or "q"), ("candidates", candidates)]
    if draw(st.booleans()):
        top.append(("meta", [("k", draw(_texts))]))
    objects = [top, *candidates, *([top[-1][1]] if top[-1][0] == "meta" else [])]
    repeated = None
    if draw(st.booleans()):  # repeat one key of one object
        where = draw(st.sampled_from(objects))
        where.append(draw(st.sampled_from(where)))
        repeated = where[-1][0]

    def spell(value: object) -> str:
        if isinstance(value, list):
            if value and isinstance(value[0], tuple):
                return "{" + ", ".join(f"{json.dumps(k)}: {spell(v)}" for k, v in value) + "}"
            return "[" + ", ".join(spell(v) for v in value) + "]"
        return json.dumps(value, ensure_ascii=draw(st.booleans()))

    return spell(top), repeated


@pytest.mark.unit
@settings(max_examples=150, deadline=None)
@given(_row_lines())
def test_a_line_decodes_as_json_loads_does_unless_a_key_repeats(spelled: tuple[str, str | None]) -> None:
    """The same object json.loads gives, or DuplicateKey naming the key given twice."""
    line, repeated = spelled
    if repeated is None:
        assert _loads_row(line) == json.loads(line)
    else:
        with pytest.raises(DuplicateKey) as info:
            _loads_row(line)
        assert info.value.args == (repeated,)
