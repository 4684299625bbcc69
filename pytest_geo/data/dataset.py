"""Reading GEO JSONL datasets: each line becomes a valid row or a problem naming file:line."""

from __future__ import annotations

import json
import marshal
import random
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain
from operator import itemgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, NamedTuple, TypeVar

from pytest_geo.data.files import open_regular
from pytest_geo.data.schemas import error_path, first_error, validator
from pytest_geo.text import printable, shorten

if TYPE_CHECKING:
    import jsonschema

MAX_MESSAGE = 200
MAX_LINE_BYTES = 16 << 20  # one row; a longer line is a problem, read past in bounded memory
SourceKey = tuple[str, int]  # (dataset path, line): where a row comes from, unique in a run
RowKey = tuple[str, int, str | None]  # and the variant it runs with (--geo-variant; None without)


class Candidate(NamedTuple):
    """A tuple of three strings: built ten times a row in a few microseconds, and once the
    garbage collector has seen it, never traversed again (a row's candidates stay in
    memory for the whole run)."""

    id: str
    title: str
    description: str

    def as_dict(self) -> dict[str, str]:
        return {"id": self.id, "title": self.title, "description": self.description}


# A dataset line's candidate object -> its (id, title, description), in C.
_candidate_texts = itemgetter("id", "title", "description")


def _texts(candidates: Iterable[Any]) -> tuple[str, ...]:
    """The candidate objects' texts, three a candidate (id, title, description), read in C.
    Raises KeyError or TypeError for a candidate that is not an object or lacks one."""
    return tuple(chain.from_iterable(map(_candidate_texts, candidates)))


def _candidates(flat: tuple[str, ...]) -> tuple[Candidate, ...]:
    """Candidates from their texts, three a candidate (`_texts`, a packed row's)."""
    return tuple(Candidate._make(flat[i:i + 3]) for i in range(0, len(flat), 3))


def _pack(path: str, line: int, query: str, flat: tuple[str, ...], target_id: str, query_id: str | None,
          target_was_chosen: bool, variant: str | None) -> bytes:
    """A row as `GeoRow.unpacked` reads it back; `flat`: the candidates' texts, three a candidate."""
    return marshal.dumps((path, line, query, flat, target_id, query_id, target_was_chosen, variant))


@dataclass(frozen=True, slots=True)
class GeoRow:
    path: str
    line: int
    query: str
    candidates: tuple[Candidate, ...]
    target_id: str
    query_id: str | None
    target_was_chosen: bool = False
    variant: str | None = None  # the rewriting strategy this row runs with (--geo-variant)

    @property
    def target(self) -> Candidate:
        for candidate in self.candidates:  # a loop, not next() over a generator: read on every row's record
            if candidate.id == self.target_id:
                return candidate
        raise StopIteration  # never: parsing checks that target_id is a candidate's id

    @property
    def label(self) -> str:
        return self.query_id if self.query_id is not None else f"line{self.line}"

    @property
    def source_key(self) -> SourceKey:
        return (self.path, self.line)

    @property
    def key(self) -> RowKey:
        return (self.path, self.line, self.variant)

    def packed(self) -> bytes:
        """This row as one bytes object (`GeoRow.unpacked` reads it back): what a pytest
        item keeps of its row, since a run holds every item to its end (PackedRow). A
        third of the parsed row's memory, and nothing for the garbage collector to walk."""
        return _pack(self.path, self.line, self.query, tuple(chain.from_iterable(self.candidates)), self.target_id,
                     self.query_id, self.target_was_chosen, self.variant)

    @classmethod
    def unpacked(cls, data: bytes) -> GeoRow:
        path, line, query, flat, target_id, query_id, chosen, variant = marshal.loads(data)
        return cls(path, line, query, _candidates(flat), target_id, query_id, chosen, variant)


class PackedRow(NamedTuple):
    """A valid row as collection keeps it (`GeoRow.packed`), with what naming its item
    needs: a run holds every item to its end, and a parsed row of ten candidates is
    three times the size of its packed bytes, and forty objects for the garbage
    collector to walk."""

    line: int
    query_id: str | None
    data: bytes

    @classmethod
    def of(cls, row: GeoRow) -> PackedRow:
        return cls(row.line, row.query_id, row.packed())

    def row(self) -> GeoRow:
        return GeoRow.unpacked(self.data)


@dataclass(frozen=True, slots=True)
class RowProblem:
    path: str
    line: int
    problem: str
    query_id: str | None = None

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.problem}"


DatasetLine = GeoRow | RowProblem
CollectedLine = PackedRow | RowProblem  # a line as a collector keeps it until its items are made


def packed_line(line: DatasetLine) -> CollectedLine:
    """A row packed (PackedRow); a problem as it is."""
    return PackedRow.of(line) if isinstance(line, GeoRow) else line


class DatasetError(Exception):
    """The dataset file as a whole cannot be read (missing, a directory, unreadable)."""


def _validator() -> jsonschema.protocols.Validator:
    return validator("geo_row.schema.json")


def _where(error: jsonschema.ValidationError) -> str:
    return error_path(error, "row")


def _schema_problem(error: jsonschema.ValidationError) -> str:
    where = _where(error)
    if error.validator == "minItems" and where == "candidates":
        instance: list[Any] = error.instance  # type: ignore[assignment]  # minItems applies to arrays
        return f"fewer than 2 candidates (got {len(instance)})"
    if error.validator == "required":
        return f"{where}: {error.message}"
    if error.validator == "type":
        if where == "row":
            got = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
                type(error.instance), "a number")
            return f"expected one JSON object per line, got {got}"
        if error.instance is None:
            return f"{where}: expected {error.validator_value}, got null"
        got = type(error.instance).__name__
        expected = error.validator_value
        expected = " or ".join(expected) if isinstance(expected, list) else expected
        return f"{where}: expected {expected}, got {got} {shorten(json.dumps(error.instance), 40)}"
    if error.validator == "minLength" and error.instance == "":
        return f"{where}: must not be empty"
    if error.validator == "pattern" and isinstance(error.instance, str) and not error.instance.strip():
        return f"{where}: must not be blank (only whitespace)"
    if error.validator == "pattern" and isinstance(error.instance, str):
        return _padded_id(where, error.instance)
    return f"{where}: {shorten(error.message, MAX_MESSAGE)}"


class TargetChooser:
    """The E-GEO harness's rule for a missing target_id (absent, null or ""): one
    `random.Random(seed)` for the whole file, consumed in file order by
    `rng.choice(candidates)` for each line without a target_id that has candidates, as
    the harness draws for it. A line rejected here still takes its draw, so every later
    row gets the target the harness gives it. The whole file must be read in order, at
    collection, for `-k`, `--deselect` and xdist not to change them."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)  # an int seed: the same in every process (no hash())

    def __call__(self, count: int) -> int:
        """The index drawn among `count` candidates (`choice` draws by the length only)."""
        return self.rng.choice(range(count))


class DuplicateKey(ValueError):
    """A key given twice in one JSON object: json keeps the last silently."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise DuplicateKey(key)  # the first key seen twice
        result[key] = value
    return result


# One decoder for every line: `json.loads(text, object_pairs_hook=...)` builds a new one per call.
_ROW_DECODER = json.JSONDecoder(object_pairs_hook=_unique_keys)


def _loads_row(text: str) -> Any:
    """`json.loads(text)`, refusing a key given twice in one object (DuplicateKey)."""
    if text.startswith("\ufeff"):  # as json.loads words it (the decoder itself does not check)
        raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
    return _ROW_DECODER.decode(text)


Row = TypeVar("Row", GeoRow, PackedRow)
# What a valid line becomes: (path, line, query, the candidates' texts (id, title,
# description, three a candidate), target id, query id, target was chosen) -> a row (GeoRow)
# or the row packed as a collector keeps it (PackedRow).
RowMaker = Callable[[str, int, str, tuple[str, ...], str, "str | None", bool], Row]


def geo_row(path: str, line: int, query: str, flat: tuple[str, ...], target_id: str,
            query_id: str | None, target_was_chosen: bool) -> GeoRow:
    return GeoRow(path, line, query, _candidates(flat), target_id, query_id, target_was_chosen)


def packed_row(path: str, line: int, query: str, flat: tuple[str, ...], target_id: str,
               query_id: str | None, target_was_chosen: bool) -> PackedRow:
    """The row packed straight from its JSON: no GeoRow built only to be packed."""
    return PackedRow(line, query_id, _pack(path, line, query, flat, target_id, query_id, target_was_chosen, None))


class _Refused(Exception):
    """A line's problem, worded: raised by the checks below, made a RowProblem by parse_line."""


def parse_line(path: str, line_no: int, raw: bytes, choose: Callable[[int], int],
               make: RowMaker[Row]) -> Row | RowProblem | None:
    """One physical line -> a row (as `make` builds it), a problem, or None for a blank
    line; `choose` draws a missing target's index (called for every JSON line the harness
    draws for, valid or not)."""
    try:
        text = _text_of(raw)
        if not text.strip():
            return None
        obj = _json_of(text)
    except _Refused as problem:
        return RowProblem(path, line_no, str(problem))
    drawn = _draw(obj, choose)
    query_id = _query_id(obj)
    try:
        flat = _row_texts(obj)
        ids = flat[::3]
        target = _target(obj, ids)
    except _Refused as problem:
        return RowProblem(path, line_no, str(problem), query_id)
    # drawn: set when target is None
    return make(path, line_no, obj["query"], flat, target if target is not None else ids[drawn or 0],
                query_id, target is None)


def _text_of(raw: bytes) -> str:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _Refused(f"invalid UTF-8 at byte {exc.start}") from None
    return text.removeprefix("\ufeff")  # also on later lines: files joined with `cat`


def _json_of(text: str) -> Any:
    """The line's JSON value; _Refused for invalid JSON, a repeated key or a lone surrogate."""
    try:
        obj = _loads_row(text)
    except DuplicateKey as exc:
        raise _Refused(f"duplicate key {shorten(repr(exc.args[0]), 60)} in one object") from None
    except json.JSONDecodeError as exc:
        raise _Refused(_json_problem(exc, text)) from None
    except RecursionError:
        raise _Refused("invalid JSON: nested too deeply") from None
    except ValueError as exc:  # e.g. an integer with more digits than Python converts
        reason = "a number with too many digits" if "digits" in str(exc) else shorten(str(exc), 80)
        raise _Refused(f"invalid JSON: {reason}") from None
    try:
        if "\\u" in text:  # a lone surrogate can only come from a \uD8xx escape
            json.dumps(obj, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise _Refused(
            f"invalid Unicode: a lone surrogate escape (\\u{ord(exc.object[exc.start]):04x}) in a string") from None
    return obj


def _json_problem(exc: json.JSONDecodeError, text: str) -> str:
    if exc.msg.startswith("Unterminated string"):
        return f"invalid JSON: unterminated string from column {exc.colno} (truncated line?)"
    if exc.pos >= len(text.rstrip()):
        return f"invalid JSON: the line ends inside a value (truncated line?): {exc.msg}"
    if exc.msg == "Extra data":
        return f"invalid JSON: more than one value on the line (extra data from column {exc.colno})"
    # json's own message can end in "at" ("Invalid control character at")
    return f"invalid JSON: {exc.msg.removesuffix(' at')} at column {exc.colno}"


def _row_texts(obj: Any) -> tuple[str, ...]:
    """The candidates' texts (id, title, description, three a candidate) of a valid row;
    _Refused naming what the schema, or the rules it cannot state, find wrong."""
    flat = _plain_texts(obj)
    if flat is not None:
        ids = flat[::3]
    else:
        error = first_error("geo_row.schema.json", obj)
        if error is not None:
            raise _Refused(_schema_problem(error))
        flat = _texts(obj["candidates"])
        ids = flat[::3]
        # the schema's pattern, where Python's `$` lets a final newline through (the plain check has it)
        padded = next((n for n, i in enumerate(ids) if i != i.strip()), None)
        if padded is not None:
            raise _Refused(_padded_id(f"candidates[{padded}].id", ids[padded]))
    if len(set(ids)) < len(ids):
        duplicates = sorted({i for i in ids if ids.count(i) > 1})
        raise _Refused(f"duplicate candidate ids: {', '.join(duplicates)}")
    return flat


def _target(obj: dict[str, Any], ids: tuple[str, ...]) -> str | None:
    """The row's target id; None when it has none (absent, null or "", as in the harness)."""
    target = obj.get("target_id") or None
    if target is not None and target not in ids:
        raise _Refused(f"target_id {target!r} is not among the candidate ids ({', '.join(ids)})")
    return target


def _padded_id(where: str, value: str) -> str:
    """One rule for ids: no whitespace at either end. Answers' ids are read stripped, so
    a row with `" a"` could never score; rejected here rather than normalised, as what a
    model is shown and what it answers must be the same string."""
    return f"{where}: {shorten(repr(value), 40)} begins or ends with whitespace, which answers cannot keep"


def _draw(obj: Any, choose: Callable[[int], int]) -> int | None:
    """The harness's draw for this line: an object without a target_id (absent, null or
    "") whose candidates are a non-empty array; None for a line it draws nothing for."""
    if not isinstance(obj, dict) or obj.get("target_id") not in (None, ""):
        return None
    candidates = obj.get("candidates")
    return choose(len(candidates)) if isinstance(candidates, list) and candidates else None


def _plain_texts(obj: Any) -> tuple[str, ...] | None:
    """The candidates' texts (id, title, description, three a candidate) of a row the
    schema accepts, checked directly for the common case; None for anything else, which
    goes through jsonschema, which finds and words the problem. A fast path only: it never
    accepts a row the schema rejects. The texts are read once, in C, for the check and the
    row alike: a candidate that is not an object, or lacks one of them, stops the read."""
    if not isinstance(obj, dict) or not isinstance(obj.get("query"), str) or not obj["query"]:
        return None
    for key in ("query_id", "id"):
        if key in obj and not (isinstance(obj[key], str) and obj[key]):
            return None
    if obj.get("target_id") is not None and not isinstance(obj["target_id"], str):
        return None
    candidates = obj.get("candidates")
    if not isinstance(candidates, list) or len(candidates) < 2:
        return None
    try:
        flat = _texts(candidates)
    except (KeyError, TypeError):
        return None
    ids = flat[::3]
    if list(map(type, flat)).count(str) < len(flat) or not all(ids) or tuple(map(str.strip, ids)) != ids:
        return None
    return flat


def _query_id(obj: Any) -> str | None:
    if isinstance(obj, dict):
        for key in ("query_id", "id"):
            if isinstance(obj.get(key), str) and obj[key]:
                return str(obj[key])
    return None


def open_dataset(path: Path | str, label: str) -> BinaryIO:
    """A JSONL file opened for reading; DatasetError naming it when it is missing, not a
    regular file (a FIFO, /dev/zero) or unreadable."""
    try:
        return open_regular(path)
    except OSError as exc:
        raise DatasetError(f"{label}: cannot read dataset: {exc.strerror or exc}") from None


def read_lines(handle: BinaryIO) -> Iterator[tuple[int, bytes | None]]:
    """(line number, bytes without the line end) per physical line; None for a line
    longer than MAX_LINE_BYTES, whose rest is skipped without being held in memory."""
    line_no = 0
    while raw := handle.readline(MAX_LINE_BYTES + 1):
        line_no += 1
        if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
            while raw and not raw.endswith(b"\n"):
                raw = handle.readline(1 << 20)
            yield line_no, None
        else:
            yield line_no, raw.rstrip(b"\r\n")


# A dataset is a JSONL file of rows, or an E-GEO benchmark data file (data/egeo_data.py).
DATASET_SUFFIXES = (".jsonl", ".json")


def is_dataset_path(path: str) -> bool:
    return path.endswith(DATASET_SUFFIXES)


def iter_dataset(path: Path | str, seed: int, display: str | None = None) -> Iterator[DatasetLine]:
    """Yield each non-blank line of a JSONL file as a row or a problem, lazily, in file
    order (the seeded target choice depends on it); an E-GEO data file's queries."""
    from pytest_geo.data.egeo_data import is_egeo_data, iter_egeo

    if is_egeo_data(path):
        return iter_egeo(path, display)
    return _iter_lines(path, seed, display, geo_row)


def iter_packed(path: Path | str, seed: int, display: str | None = None) -> Iterator[CollectedLine]:
    """`iter_dataset` with each row packed as read (PackedRow), as collection keeps it."""
    from pytest_geo.data.egeo_data import is_egeo_data, iter_egeo

    if is_egeo_data(path):
        return map(packed_line, iter_egeo(path, display))
    return _iter_lines(path, seed, display, packed_row)


def _iter_lines(path: Path | str, seed: int, display: str | None, make: RowMaker[Row]) -> Iterator[Row | RowProblem]:
    label = display or str(path)
    choose = TargetChooser(seed)
    with open_dataset(path, label) as handle:
        for line_no, raw in read_lines(handle):
            if raw is None:
                yield RowProblem(label, line_no, f"line longer than {MAX_LINE_BYTES // (1 << 20)} MiB")
                continue
            parsed = parse_line(label, line_no, raw, choose, make)
            if parsed is not None:
                yield parsed


def split_lines(lines: Iterable[DatasetLine]) -> tuple[list[GeoRow], list[RowProblem]]:
    """Valid rows and problems, each in file order."""
    rows: list[GeoRow] = []
    problems: list[RowProblem] = []
    for line in lines:
        if isinstance(line, RowProblem):
            problems.append(line)
        else:
            rows.append(line)
    return rows, problems


def read_dataset(path: Path | str, seed: int, display: str | None = None) -> list[DatasetLine]:
    return list(iter_dataset(path, seed, display))


# The shapes of generated names: a query id of one of these shapes is never used as is.
GENERATED_NAME = re.compile(r"line\d+|.*@line\d+", re.DOTALL)


def row_names(lines: Sequence[DatasetLine | PackedRow]) -> list[str]:
    """Stable node-id names, distinct by construction.

    A query id is used as it is when it is used once, holds nothing a terminal would
    interpret, and does not look like a generated name; a row without one is
    `line<N>`; any other query id becomes `<query id, escaped>@line<N>`. Verbatim names
    are distinct (used once) and never look generated; `line<N>` and `...@line<N>` are
    distinct among themselves (one row per line) and from each other (`@`)."""
    counts: dict[str, int] = {}
    for item in lines:
        if item.query_id is not None:
            counts[item.query_id] = counts.get(item.query_id, 0) + 1
    names = []
    for item in lines:
        qid = item.query_id
        if qid is None:
            names.append(f"line{item.line}")
        elif counts[qid] == 1 and not GENERATED_NAME.fullmatch(qid) and printable(qid) == qid:
            names.append(qid)
        else:
            names.append(f"{printable(qid)}@line{item.line}")
    return names
