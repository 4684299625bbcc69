"""Names of suite rows in node ids. Rows whose order the user fixed (a file, a list, a
tuple) are named by position: `train[0]`. Rows from Python data with no order of its
own (a set, a generator over one, any other iterable) are named by content and sorted by
that name: under xdist every worker collects the rows itself, and a set of strings
iterates in another order under each worker's hash seed, so "the fourth row" would be a
different row on each worker (some ran twice, others never)."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Sequence
from typing import Any

DIGITS = 8  # of the content's SHA-256; two rows sharing them are told apart by a suffix


def _plain(value: Any) -> Any:
    """What JSON cannot hold, in a form that is the same in every process."""
    if isinstance(value, set | frozenset):
        return sorted(canonical(item) for item in value)
    return repr(value)


def canonical(value: Any) -> str:
    try:
        return json.dumps(value, sort_keys=True, ensure_ascii=False, default=_plain)
    except (TypeError, ValueError):  # keys that do not sort together, a circular value
        return repr(value)


def by_content(rows: Sequence[Any]) -> list[tuple[str, Any]]:
    """Each row with its name (DIGITS hex digits of its content's hash, `-2`, `-3` for a
    row that repeats one or shares its digits), sorted by name, then content."""
    keyed = sorted((hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:DIGITS], text, index)
                   for index, text in enumerate(map(canonical, rows)))
    seen: Counter[str] = Counter()
    named = []
    for digest, _, index in keyed:
        seen[digest] += 1
        named.append((digest if seen[digest] == 1 else f"{digest}-{seen[digest]}", rows[index]))
    return named


def by_position(rows: Sequence[Any]) -> list[tuple[str, Any]]:
    return [(str(index), row) for index, row in enumerate(rows)]
