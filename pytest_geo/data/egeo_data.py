"""Reading the E-GEO benchmark's data files as they ship (`test_data.json` and
`test_selected_products.json` beside it; `initial_ranking/` for the judges' cached
before-rankings), as GEO rows: one row a query, its products numbered 1 to n in their
stored order (a product's id is its number, as the benchmark's judges answer), the target
the selected product. A malformed entry is a problem naming the file and the query id."""

from __future__ import annotations

import ast
import functools
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from pytest_geo.data.dataset import Candidate, DatasetError, DatasetLine, GeoRow, RowProblem
from pytest_geo.data.files import open_regular
from pytest_geo.text import shorten

# Judges whose before-rankings the benchmark ships as caches (initial_ranking/*_<name>.json).
CACHED_JUDGES = ("gpt41", "gpt5", "gemini", "claude", "deepseek", "llama")
MAX_FILE_BYTES = 1 << 30  # the full data set is tens of megabytes


def is_egeo_data(path: Path | str) -> bool:
    """A `.json` dataset is E-GEO's (GEO rows of our own are JSONL)."""
    return Path(path).suffix == ".json"


def _split_of(path: Path) -> str:
    """`test` for test_data.json, `train` for the train/validation files."""
    return "test" if path.name.startswith("test") else "train"


def dataset_split(path: Path | str) -> str:
    """The split a dataset's rows report: E-GEO's test_data.json is its held-out `test`
    split; any other dataset (a JSONL file, E-GEO's train or validation file) is training
    data, as a suite's `data` is."""
    return _split_of(Path(path)) if is_egeo_data(path) else "train"


def selected_products_path(path: Path) -> Path:
    return path.with_name(f"{_split_of(path)}_selected_products.json")


def initial_ranking_path(path: Path, judge: str) -> Path:
    split = "test" if _split_of(path) == "test" else "train_val"
    return path.parent / "initial_ranking" / f"{split}_initial_ranking_{judge}.json"


def _load(path: Path, label: str) -> dict[str, Any]:
    try:
        with open_regular(path) as handle:
            raw = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise DatasetError(f"{label}: cannot read: {exc.strerror or exc}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise DatasetError(f"{label}: larger than {MAX_FILE_BYTES >> 20} MiB")
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DatasetError(f"{label}: not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise DatasetError(f"{label}: not an object keyed by query id (it is a JSON {type(data).__name__})")
    return data


def product_text(value: Any) -> str:
    """A product's `features` or `description` as the benchmark reads it: a string holding
    a Python list literal (`"['a', 'b']"`) is its items joined with spaces; any other
    string is itself; anything else (or an empty list) is ""."""
    if not isinstance(value, str):
        return ""
    text = value.strip()
    if text.startswith("[") and text.endswith("]"):
        try:
            items = ast.literal_eval(text)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return text
        if isinstance(items, list):
            return " ".join(str(item).strip() for item in items if str(item).strip())
    return text


def _candidate(number: int, product: Any) -> Candidate:
    if not isinstance(product, dict):
        raise ValueError(f"product {number} is a JSON {type(product).__name__}, not an object")
    title = product.get("title")
    if not isinstance(title, str) or not title.strip():
        raise ValueError(f"product {number} has no title")
    features, description = product_text(product.get("features")), product_text(product.get("description"))
    body = "\n".join(part for part in (f"Features: {features}" if features else "",
                                       f"Description: {description}" if description else "") if part)
    return Candidate(str(number), title.strip(), body)


def _row(label: str, ordinal: int, query_id: str, entry: Any, selected: Mapping[str, Any]) -> GeoRow:
    if not isinstance(entry, dict) or not isinstance(entry.get("query"), str) or not entry["query"].strip():
        raise ValueError("no query text")
    products = entry.get("products")
    if not isinstance(products, list) or len(products) < 2:
        raise ValueError("'products' must be a list of at least 2 products")
    choice = selected.get(query_id)
    if not isinstance(choice, dict):
        raise ValueError("no entry in the selected products file")
    index = choice.get("ind")
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(products):
        raise ValueError(f"selected 'ind' {shorten(repr(index), 40)} is not an index of its {len(products)} products")
    candidates = tuple(_candidate(number, product) for number, product in enumerate(products, 1))
    return GeoRow(label, ordinal, entry["query"], candidates, str(index + 1), query_id)


# Where each E-GEO row's file is, by the label its rows carry (GeoRow.path): the judges'
# cached before-rankings are read beside it (cached_order).
_SOURCES: dict[str, Path] = {}


def iter_egeo(path: Path | str, display: str | None = None) -> Iterator[DatasetLine]:
    """Each query of an E-GEO data file as a row (in the file's order, numbered from 1 as
    its `line`), or a problem naming the file and the query id."""
    path = Path(path)
    label = display or str(path)
    _SOURCES[label] = path.resolve()
    data = _load(path, label)
    selected_path = selected_products_path(path)
    selected = _load(selected_path, str(selected_path))
    for ordinal, (query_id, entry) in enumerate(data.items(), 1):
        try:
            yield _row(label, ordinal, str(query_id), entry, selected)
        except ValueError as exc:
            yield RowProblem(label, ordinal, f"query {shorten(str(query_id), 60)}: {exc}", str(query_id))


def _results(value: Any) -> dict[str, Any] | None:
    """A cached entry's `results` object (older caches hold it as a JSON string); None
    when it has none."""
    results = value.get("results") if isinstance(value, dict) else None
    if isinstance(results, str):
        try:
            results = json.loads(results)
        except json.JSONDecodeError:
            return None
    return results if isinstance(results, dict) else None


def _numbers(value: Any) -> list[str] | None:
    """A list of product numbers as product ids; None if it is not one."""
    if not isinstance(value, list) or not all(isinstance(n, int) and not isinstance(n, bool) for n in value):
        return None
    return [str(n) for n in value]


def cached_order(row: GeoRow, judge: str) -> tuple[str, ...] | None:
    """The judge's cached before-ranking of an E-GEO row (product ids, best first); None
    when the row is not E-GEO data or the judge has no cache there. A ValueError when the
    cache leaves the row out or does not rank its target: E-GEO drops such a query for
    that judge, so its cell stays empty."""
    source = _SOURCES.get(row.path)
    rankings = _rankings(source, judge) if source is not None else None
    if source is None or rankings is None:
        return None
    order = rankings.get(row.query_id or "")
    if order is None:
        cache = initial_ranking_path(source, judge).name
        raise ValueError(f"no cached before-ranking of query {row.query_id} in {cache}")
    if row.target_id not in order:
        raise ValueError(f"the cached before-ranking of query {row.query_id} does not rank its target {row.target_id}")
    return tuple(order)


def cached_flags(row: GeoRow, judge: str) -> frozenset[str] | None:
    """The products the judge's cached before-ranking of an E-GEO row lists as
    questionable; None when its cache entry has no such list (or there is no cache)."""
    source = _SOURCES.get(row.path)
    flags = _flags(source, judge) if source is not None else None
    listed = flags.get(row.query_id or "") if flags is not None else None
    return frozenset(listed) if listed is not None else None


@functools.lru_cache(maxsize=32)
def _rankings(path: Path, judge: str) -> dict[str, list[str]] | None:
    return cached_before_rankings(path, judge)


@functools.lru_cache(maxsize=32)
def _flags(path: Path, judge: str) -> dict[str, list[str]] | None:
    cached = _cached(path, judge)
    if cached is None:
        return None
    return {query_id: flags for query_id, (_, flags) in cached.items() if flags is not None}


@functools.lru_cache(maxsize=32)
def _cached(path: Path, judge: str) -> dict[str, tuple[list[str] | None, list[str] | None]] | None:
    """Each query's (ranking, questionable products) in the judge's cache, the file read
    and its entries parsed once for both; None when the judge has no cache."""
    entries = _cache_entries(path, judge)
    if entries is None:
        return None
    cached = {}
    for query_id, value in entries.items():
        results = _results(value)
        if results is not None:
            cached[str(query_id)] = (_numbers(results.get("ranking")) or None,
                                     _numbers(results.get("questionable_products")))
    return cached


def _cache_entries(path: Path, judge: str) -> dict[str, Any] | None:
    if judge not in CACHED_JUDGES:
        return None
    cache = initial_ranking_path(path, judge)
    if not cache.is_file():
        return None
    return _load(cache, str(cache))


def cached_before_rankings(path: Path | str, judge: str) -> dict[str, list[str]] | None:
    """The judge's cached before-rankings for an E-GEO data file (query id -> product ids,
    best first), or None when the judge has no cache (not one of CACHED_JUDGES, or no file).
    A query missing from the cache, or whose entry holds no ranking, is left out: the
    benchmark drops it for that judge."""
    cached = _cached(Path(path), judge)
    if cached is None:
        return None
    return {query_id: ranking for query_id, (ranking, _) in cached.items() if ranking is not None}
