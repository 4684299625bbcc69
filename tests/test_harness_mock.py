"""Switching from the E-GEO harness: its mock's rankings and rewrites, its targets for
rows without one (null and "" included), its `optimize` command and its result JSON.

The datasets in tests/harness_layout are ours, in the harness's layout; each `.expected`
file is what the harness prints for it (see the README there)."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest

from conftest import SMOKE, copy_prompts
from pytest_geo import cli
from pytest_geo.data.dataset import GeoRow, RowProblem, read_dataset
from pytest_geo.llm.base import ChatRequest
from pytest_geo.llm.mock import MockClient, ranker_order, rewrite, word_count

LAYOUT = Path(__file__).parent / "harness_layout"
OPENING = "Best for buyers who want a clear, reliable choice."
CLOSING = "Key specs are easy to scan, with differentiated value over typical alternatives."


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "GEO_EVAL_MOCK"):
        monkeypatch.delenv(name, raising=False)
    for path in LAYOUT.glob("*.jsonl"):
        shutil.copy(path, tmp_path / path.name)
    return tmp_path


def expected_lines(name: str) -> list[str]:
    return (LAYOUT / f"{name}.expected").read_text(encoding="utf-8").splitlines()


# --- the mock's rule, case by case -------------------------------------------------------


def order(*descriptions: str) -> list[str]:
    """The mock's order of candidates a, b, c ... with these descriptions, listed in this order."""
    return ranker_order({"candidates": [{"id": "abcdefgh"[k], "description": d} for k, d in enumerate(descriptions)]})


@pytest.mark.unit
def test_the_mock_ranks_best_for_then_length_then_the_greater_id() -> None:
    assert order("a long description without it", "best FOR me", "x") == ["b", "a", "c"]  # any case
    assert order("same", "same", "the longest of the three") == ["c", "b", "a"]  # a tie: the greater id first
    assert order("twelve chars", "fifteen chars!!") == ["b", "a"]  # plainly longer first


@pytest.mark.unit
def test_the_mock_reads_the_last_description_with_the_prompts_closing_line() -> None:
    # 21 characters against 15 + "\n\nReturn ONLY JSON." (19): the last one is the longer
    assert order("abcdefghij klmnopqrst", "abcdefghijklmno") == ["b", "a"]
    assert order("abcdefghijklmno", "abcdefghij klmnopqrst", "z" * 50) == ["c", "b", "a"]


@pytest.mark.unit
def test_the_mock_counts_the_indent_of_a_descriptions_later_lines() -> None:
    # "line one\n  line two" is 19 characters as the harness's ranker prompt shows it
    assert order("123456789012345678", "line one\nline two", "z" * 30) == ["c", "b", "a"]


@pytest.mark.unit
def test_a_title_line_inside_a_description_stops_what_the_mock_reads() -> None:
    # a: nothing read (0); b: 15; c: "z" and the closing line (20)
    assert order("title: x\n" + "y" * 40, "short text here", "z") == ["c", "b", "a"]
    assert order("title: x\ndescription: again\n" + "y" * 40, "short text here", "z") == ["a", "c", "b"]


@pytest.mark.unit
def test_one_line_descriptions_are_read_as_the_harness_reads_them() -> None:
    # one line each (the mock reads these without splitting): a title line reads as nothing,
    # a description line as nothing but, on the last candidate, the closing line (17)
    assert order("title: a long line the mock never reads", "bb", "c") == ["c", "b", "a"]
    assert order("description: a long line", "bb") == ["b", "a"]
    assert order("a" * 18, "description: x") == ["a", "b"]
    assert order("a" * 16, "description: x") == ["b", "a"]
    assert order("   ", "\u00a0") == ["b", "a"]  # blank: 0 against the closing line alone (17)
    assert order("  best for you  ", "z" * 40) == ["a", "b"]


@pytest.mark.unit
def test_the_mock_rewrite_wraps_the_original() -> None:
    assert rewrite({"description": "  Steel, 1.7 litres.  "}) == f"{OPENING} Steel, 1.7 litres. {CLOSING}"
    assert rewrite({"description": ""}) == f"{OPENING} Product details. {CLOSING}"
    assert rewrite({"description": "a\nDescription: dropped\nb\nReturn only JSON please\nc"}) == (
        f"{OPENING} a\nb {CLOSING}")


@pytest.mark.unit
def test_the_mock_writes_its_answers_as_json_dumps_does() -> None:
    """Non-ASCII as it is, quotes, tabs, line breaks and backslashes escaped."""
    ids = ['q"1', "caf\u00e9", "tab\tnew\nline", "\\", ""]
    request = ChatRequest("ranker", "m", (), context={"candidates": [{"id": i, "description": "d"} for i in ids]})
    answer = asyncio.run(MockClient().complete(request)).text
    assert answer == '{"ordered_ids": ["", "tab\\tnew\\nline", "q\\"1", "caf\u00e9", "\\\\"]}'


@pytest.mark.unit
def test_the_mock_counts_each_system_prompts_own_words() -> None:
    """A system prompt's count is kept (a run sends the same few): each keeps its own."""
    async def prompt_tokens(system: str) -> int:
        messages = ({"role": "system", "content": system}, {"role": "user", "content": "u v"})
        return (await MockClient().complete(ChatRequest("ranker", "m", messages, context={"candidates": []}))).prompt_tokens

    assert [asyncio.run(prompt_tokens(system)) for system in ("a b", "a b c", "a b", "", "a\tb c d")] == [4, 5, 4, 2, 6]


@pytest.mark.unit
def test_the_mock_counts_words_split_by_any_whitespace() -> None:
    assert word_count("") == 0
    assert word_count("  \t\n ") == 0
    assert word_count("Return ONLY JSON.") == 3
    assert word_count("  a  b\tc\x1fd\x0be\n") == 5  # \x1f and \x0b split words, as str.split() does
    assert word_count("caf\u00e9 \u2003x\u00a0y") == 3  # non-ASCII: an em space and a no-break space split too


# --- the harness's output, row for row ------------------------------------------------------


@pytest.mark.e2e
@pytest.mark.parametrize("name", ["ranking", "absent_targets"])
def test_egeo_evaluate_prints_what_the_harness_prints(here: Path, capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    monkeypatch.setenv("GEO_EVAL_MOCK", "1")
    assert cli.main(["evaluate", "--dataset", f"{name}.jsonl", "--verbose"]) == 0
    assert capsys.readouterr().out.splitlines() == expected_lines(name)


@pytest.mark.e2e
def test_a_rejected_line_leaves_every_other_row_the_harness_target(
        here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["evaluate", "--dataset", "rejected_line.jsonl", "--verbose", "--mock"]) == 1
    out, err = capsys.readouterr()
    harness_rows = [line for line in expected_lines("rejected_line") if line.startswith("{\"query_id\"")]
    assert out.splitlines()[:5] == [line for line in harness_rows if '"c1"' not in line]
    assert json.loads(out.splitlines()[4])["target_id"] == "g1"  # not g3, as without the rejected line
    assert "rejected_line.jsonl:5: fewer than 2 candidates (got 1)" in err.splitlines()


@pytest.mark.plugin
def test_the_plugin_agrees_with_egeo(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    copy_prompts(pytester.path / "prompts")
    shutil.copy(LAYOUT / "ranking.jsonl", pytester.path / "ranking.jsonl")
    result = pytester.runpytest("ranking.jsonl", "--geo-mock", "--geo-report", "r.json")
    result.assert_outcomes(passed=5)
    report = json.loads((pytester.path / "r.json").read_text())
    fields = ("query_id", "target_id", "rank_before", "rank_after")
    assert [[r[k] for k in fields] for r in report["rows"]] == [
        [json.loads(line)[k] for k in fields] for line in expected_lines("ranking")[:5]]
    assert report["geo"]["overall"] == json.loads("\n".join(expected_lines("ranking")[5:]))


@pytest.mark.e2e
def test_the_smoke_file_gives_the_seeds_documented_result(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["evaluate", "--dataset", str(SMOKE), "--limit", "5", "--verbose", "--mock"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:5] == [json.dumps({"query_id": f"q{i}", "target_id": t, "rank_before": 3, "rank_after": 1,
                                   "rank_improvement": 2.0}) for i, t in enumerate(("p1", "v3", "s3", "e3", "h3"), 1)]
    assert json.loads("\n".join(out[5:])) == {
        "avg_rank_improvement": 2.0, "n": 5, "stderr_rank_improvement": 0.0, "win_rate": 1.0}


# --- absent targets -----------------------------------------------------------------------


@pytest.mark.unit
def test_null_and_empty_target_ids_are_absent_targets(tmp_path: Path) -> None:
    lines = read_dataset(LAYOUT / "absent_targets.jsonl", 7)
    assert not [line for line in lines if isinstance(line, RowProblem)]
    rows = [line for line in lines if isinstance(line, GeoRow)]
    assert [(r.target_id, r.target_was_chosen) for r in rows] == [
        ("k2", True), ("l2", True), ("m2", True), ("p2", False), ("g3", True)]


@pytest.mark.unit
def test_a_target_id_of_another_type_is_still_a_problem(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"query": "q", "target_id": 5, "candidates": [
        {"id": "a", "title": "", "description": ""}, {"id": "b", "title": "", "description": ""}]}) + "\n")
    [problem] = read_dataset(path, 7)
    assert str(problem) == f"{path}:1: target_id: expected string or null, got int 5"


# --- egeo optimize --------------------------------------------------------------------------


@pytest.mark.unit
def test_optimize_is_the_harness_command_with_its_default_iters() -> None:
    parser = cli.build_parser()
    for command in ("optimize", "optimize-prompts"):
        args = parser.parse_args([command, "--train", "t.jsonl", "--val", "v.jsonl"])
        assert args.iters == 5


@pytest.mark.e2e
@pytest.mark.parametrize("command", ["optimize", "optimize-prompts"])
def test_optimize_prints_the_harness_result_json_and_its_prose_on_stderr(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], command: str) -> None:
    monkeypatch.chdir(tmp_path)
    copy_prompts(tmp_path / "prompts")
    shutil.copy(SMOKE, tmp_path / "smoke.jsonl")
    assert cli.main([command, "--train", "smoke.jsonl", "--val", "smoke.jsonl", "--iters", "2", "--mock"]) == 0
    out, err = capsys.readouterr()
    result = json.loads(out)
    assert {k: result[k] for k in ("applied", "history_len", "saved_to", "hint")} == {
        "applied": False, "history_len": 3, "saved_to": str(tmp_path / "prompts" / "rewriter_user.candidate.txt"),
        # the harness says "re-run with --apply" here too, which would change nothing (issue 37)
        "hint": "The current prompt stayed best; nothing needed applying.",
    }
    # The mock rewriter ignores the prompt, so every candidate ties the current one, which stays best.
    assert result["best"] == {"iter": 0, "prompt": (tmp_path / "prompts" / "rewriter_user.txt").read_text(),
                              "val": {"avg_rank_improvement": 2.0, "n": 8, "stderr_rank_improvement": 0.0,
                                      "win_rate": 1.0}}
    assert result["model_calls"] == 58  # and our own keys beside the harness's
    assert "candidate 0 (current prompt): validation avg_rank_improvement=2.0000" in err
    assert out.startswith("{\n  \"applied\": false,")  # sorted keys, indent 2, as the harness prints
