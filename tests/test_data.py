"""Dataset reading: seeded target choice, names, and line handling."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_geo.data import files
from pytest_geo.data.dataset import (
    GeoRow,
    RowProblem,
    read_dataset,
    row_names,
)

CANDS = [{"id": i, "title": i, "description": i} for i in ("a", "b", "c", "d", "e")]


@pytest.mark.e2e
def test_target_choice_is_the_same_in_every_process(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps({"query": f"query {i}", "candidates": CANDS}) + "\n" for i in range(20)))
    here = [line.target_id for line in read_dataset(path, 7) if isinstance(line, GeoRow)]
    code = (
        "from pytest_geo.data.dataset import read_dataset;"
        f"print(','.join(r.target_id for r in read_dataset({str(path)!r}, 7)))"
    )
    for hashseed in ("1", "2"):
        out = subprocess.run(
            [sys.executable, "-c", code], env={**os.environ, "PYTHONHASHSEED": hashseed},
            capture_output=True, text=True, check=True,
        ).stdout.strip()
        assert out.split(",") == here
    assert len(set(here)) > 1


@pytest.mark.unit
def test_bom_crlf_and_blank_lines(tmp_path: Path) -> None:
    row = json.dumps({"query": "q", "candidates": CANDS[:2], "target_id": "a"})
    path = tmp_path / "d.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + row.encode() + b"\r\n\r\n   \n" + row.encode() + b"\r\n")
    lines = read_dataset(path, seed=1)
    assert [type(x) for x in lines] == [GeoRow, GeoRow]
    assert [x.line for x in lines] == [1, 4]


@pytest.mark.unit
def test_duplicate_query_ids_get_distinct_names(tmp_path: Path) -> None:
    row = {"query": "q", "candidates": CANDS[:2], "target_id": "a"}
    path = tmp_path / "d.jsonl"
    path.write_text("\n".join(json.dumps({**row, "query_id": q}) for q in ("x", "y", "x")) + "\n{bad\n")
    lines = read_dataset(path, seed=1)
    assert isinstance(lines[3], RowProblem)
    assert row_names(lines) == ["x@line1", "y", "x@line3", "line4"]


@pytest.mark.unit
def test_long_lines_give_short_messages(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"query": "q" * 100_000, "candidates": "nope"}) + "\n")
    (problem,) = read_dataset(path, seed=1)
    assert isinstance(problem, RowProblem)
    assert str(problem).startswith(f"{path}:1: candidates: expected array, got str")
    assert len(str(problem)) < 300


def _lines_with_ids(tmp_path: Path, ids: list[str | None]) -> list[GeoRow | RowProblem]:
    rows = [{"query": "q", "candidates": CANDS[:2], "target_id": "a"} | ({} if q is None else {"query_id": q})
            for q in ids]
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return read_dataset(path, seed=1)


@pytest.mark.unit
def test_generated_names_never_equal_a_query_id(tmp_path: Path) -> None:
    ids = ["q1", "q1", "q1@line2", None, "line4", "line5@line4", "ok"]
    names = row_names(_lines_with_ids(tmp_path, ids))
    assert len(set(names)) == len(names), names
    assert names[-1] == "ok"  # a plain, unique id stays as it is
    assert names[3] == "line4"  # the row without an id keeps its line name


@pytest.mark.unit
def test_names_are_distinct_for_any_query_ids(tmp_path: Path) -> None:
    """Every id a name could be built from, and every name the rule builds, as query ids."""
    ids: list[str | None] = []
    for line in range(1, 5):
        ids += [None, f"line{line}", f"x@line{line}", "x", "x\n", "x\\x0a", f"x\\x0a@line{line}", "x\x1b"]
    names = row_names(_lines_with_ids(tmp_path, ids))
    assert len(set(names)) == len(names)
    assert all(not any(ord(ch) < 32 for ch in name) for name in names)


@pytest.mark.unit
def test_control_characters_in_query_ids_are_escaped_in_names(tmp_path: Path) -> None:
    names = row_names(_lines_with_ids(tmp_path, ["\x1b[31mred", "a\nb", "plain"]))
    assert names == ["\\x1b[31mred@line1", "a\\x0ab@line2", "plain"]


@pytest.mark.unit
def test_atomic_write_keeps_a_files_mode_and_gives_a_new_one_the_umasks(tmp_path: Path) -> None:
    existing = tmp_path / "existing.json"
    existing.write_text("old", encoding="utf-8")
    existing.chmod(0o640)
    files.write_text_atomic(existing, "new ✓")
    fresh = tmp_path / "deeper" / "fresh.json"
    files.write_text_atomic(fresh, "first", durable=False)
    mask = os.umask(0)
    os.umask(mask)
    assert existing.read_text(encoding="utf-8") == "new ✓" and existing.stat().st_mode & 0o777 == 0o640
    assert fresh.read_text(encoding="utf-8") == "first" and fresh.stat().st_mode & 0o777 == 0o666 & ~mask
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["deeper", "existing.json", "fresh.json"]


@pytest.mark.unit
def test_atomic_write_steps_over_a_temp_file_a_killed_process_of_the_same_pid_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(files, "_TEMPS", itertools.count(5))
    left = tmp_path / f".out.json.{os.getpid()}.5.tmp"
    left.write_text("half", encoding="utf-8")
    files.write_text_atomic(tmp_path / "out.json", "whole")
    assert (tmp_path / "out.json").read_text(encoding="utf-8") == "whole"
    assert left.read_text(encoding="utf-8") == "half"  # not this process's to remove
