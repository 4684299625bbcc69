"""Rewrites made elsewhere, to score without a rewriter call (`--geo-rewrites FILE`,
`egeo score --rewrites FILE`; E-GEO's "mode A"): the benchmark's `rewrites.jsonl` (one
object a line) or a JSON array of the same objects. Each names its `query_id`, the
target's `rand_idx` (its 0-based index among the products) and non-empty
`initial_product` and `optimized_product`. Every problem names the file and the line."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_geo.data.dataset import DatasetError, GeoRow
from pytest_geo.data.files import open_regular

MAX_FILE_BYTES = 1 << 30


class RewritesError(DatasetError):
    """A rewrites file that cannot be scored: its file, line and problem."""


@dataclass(frozen=True)
class GivenRewrite:
    query_id: str
    rand_idx: int
    text: str  # optimized_product, the description the judges see after
    line: int  # where it is in the file, for errors


def _entries(path: Path) -> Iterator[tuple[int, Any]]:
    """(line number, parsed value) of each entry: the lines of a JSONL file, or the items
    of a JSON array (numbered by the line each item starts on)."""
    try:
        with open_regular(path) as handle:
            raw = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise RewritesError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RewritesError(f"{path}: not UTF-8: {exc}") from None
    if text.lstrip().startswith("["):
        yield from _array(path, text)
        return
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                yield number, json.loads(line)
            except json.JSONDecodeError as exc:
                raise RewritesError(f"{path}:{number}: not valid JSON: {exc.msg}") from None


def _array(path: Path, text: str) -> Iterator[tuple[int, Any]]:
    decoder = json.JSONDecoder()
    try:
        items = decoder.decode(text)
    except json.JSONDecodeError as exc:
        raise RewritesError(f"{path}:{exc.lineno}: not valid JSON: {exc.msg}") from None
    # Each item's line: where its object opens, found by decoding the array item by item.
    position = text.index("[") + 1
    for item in items:
        position = text.index("{", position) if isinstance(item, dict) else position
        line = text.count("\n", 0, position) + 1
        _, position = decoder.raw_decode(text, position)
        yield line, item
        while position < len(text) and text[position] in " \t\r\n,":
            position += 1


def _given(path: Path, number: int, entry: Any) -> GivenRewrite:
    where = f"{path}:{number}"
    if not isinstance(entry, dict):
        raise RewritesError(f"{where}: a rewrite must be a JSON object, not a JSON {type(entry).__name__}")
    query_id = entry.get("query_id")
    if isinstance(query_id, bool) or not isinstance(query_id, str | int) or str(query_id).strip() == "":
        raise RewritesError(f"{where}: no query_id")
    rand_idx = entry.get("rand_idx")
    if isinstance(rand_idx, bool) or not isinstance(rand_idx, int):
        raise RewritesError(f"{where}: query {query_id}: rand_idx must be an integer, not {rand_idx!r}")
    for key in ("initial_product", "optimized_product"):
        value = entry.get(key)
        if not isinstance(value, str) or not value.strip():
            raise RewritesError(f"{where}: query {query_id}: {key} must be a non-empty string")
    return GivenRewrite(str(query_id), rand_idx, entry["optimized_product"], number)


def load_rewrites(path: Path | str) -> dict[str, GivenRewrite]:
    """query id -> its rewrite; a RewritesError for a malformed line or a query given twice."""
    path = Path(path)
    rewrites: dict[str, GivenRewrite] = {}
    for number, entry in _entries(path):
        given = _given(path, number, entry)
        first = rewrites.get(given.query_id)
        if first is not None:
            raise RewritesError(f"{path}:{number}: query {given.query_id} is given twice (first on line {first.line})")
        rewrites[given.query_id] = given
    if not rewrites:
        raise RewritesError(f"{path}: no rewrites")
    return rewrites


def check_rewrites(path: Path | str, rewrites: Mapping[str, GivenRewrite], rows: Iterable[GeoRow],
                   every_row: bool) -> None:
    """E-GEO's rules against the run's rows: each row has its rewrite, with `rand_idx` the
    target's index; with `every_row` (the run is the whole dataset), no rewrite names a
    query the dataset does not have."""
    seen: set[str] = set()
    for row in rows:
        query_id = row.query_id or ""
        if query_id in seen:
            continue
        seen.add(query_id)
        given = rewrites.get(query_id)
        if given is None:
            raise RewritesError(f"{path}: no rewrite of query {query_id} (every query of the run needs one)")
        index = [c.id for c in row.candidates].index(row.target_id)
        if given.rand_idx != index:
            raise RewritesError(f"{path}:{given.line}: query {query_id}: rand_idx {given.rand_idx} is not its "
                                f"target's index {index}")
    extra = [g for g in rewrites.values() if g.query_id not in seen]
    if every_row and extra:
        raise RewritesError(f"{path}:{extra[0].line}: query {extra[0].query_id} is not among the run's rows")
