"""Request changes remembered beside the answer cache, so later runs start with them.

What a server refused for a model (llm/healing.py) is written to
`<cache dir>/request_changes.json`, per server (the sha256 of its base URL: no URL, and
so nothing a URL may carry, reaches the file). A later run against the same server
sends the changed requests from its first call, its `geo:` header and summary say so,
and its cache keys match the answers stored. `--geo-no-cache` neither reads nor writes
the file; deleting it makes the next run learn again."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pytest_geo.data.files import open_regular, write_text_atomic
from pytest_geo.llm.profiles import Lesson

FILENAME = "request_changes.json"
MAX_BYTES = 1 << 20  # a few lines per model; anything larger is not ours


def server_key(base_url: str) -> str:
    return hashlib.sha256(base_url.encode("utf-8")).hexdigest()[:32]


def _read(path: Path) -> dict[str, Any]:
    try:
        with open_regular(path) as handle:
            data = handle.read(MAX_BYTES + 1)
        entry: Any = json.loads(data.decode("utf-8")) if len(data) <= MAX_BYTES else {}
    except (OSError, ValueError):
        return {}
    return entry if isinstance(entry, dict) else {}


def load_lessons(cache_dir: Path, base_url: str) -> list[Lesson]:
    """The changes remembered for the server; an unreadable file remembers none."""
    entries = _read(cache_dir / FILENAME).get(server_key(base_url))
    lessons = [Lesson.from_json(entry) for entry in entries] if isinstance(entries, list) else []
    return [lesson for lesson in lessons if lesson is not None]


def save_lessons(cache_dir: Path, base_url: str, lessons: Iterable[Lesson]) -> None:
    """Add `lessons` to the server's entry; best effort, like the cache."""
    path = cache_dir / FILENAME
    data = _read(path)
    known = load_lessons(cache_dir, base_url)
    seen = {(lesson.model, lesson.param) for lesson in known}
    for lesson in lessons:
        if (lesson.model, lesson.param) not in seen:
            seen.add((lesson.model, lesson.param))
            known.append(lesson)
    data[server_key(base_url)] = [lesson.as_json() for lesson in known]
    try:
        write_text_atomic(path, json.dumps(data, indent=1, sort_keys=True), durable=False)
    except OSError:
        pass
