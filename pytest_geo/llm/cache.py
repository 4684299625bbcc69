"""An on-disk cache of model answers, as a wrapper around any client.

Hand-written rather than `diskcache`: diskcache pickles values, so a cache directory
shared between CI jobs would become a code-execution vector. Here each entry is one small
JSON file named by the sha256 of the request, written to a temp file in the same
directory and then renamed over the final name (`os.replace` is atomic on POSIX and
Windows). Threads, xdist workers and a process killed mid-write can therefore never
leave a torn entry under a final name; a temp file is never read (a killed writer's is
removed by the next run once it is an hour old), and an entry that cannot be read or
parsed, or whose fields are not what `put` writes (a planted `prompt_tokens` of 10**400
would fail every row reading it, one of 10**30 would claim trillions saved), is rejected:
a miss, overwritten by the live answer and counted (`cache_rejected` in the usage).

The key covers the base URL and the body as sent (model, messages and every parameter
the model's profile sent, after any change a refusal taught: llm/healing.py; so the output
cap and the response schema too). It never includes the API key (answers do not depend
on it, and keys must not reach disk) nor `ChatRequest.context` (the mock's input, not what
a server sees). Errors are not cached, nor answers that cannot be used whatever is asked
next: one cut at the output cap, or over the answer size cap (MAX_ANSWER_CHARS).
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from pytest_geo.data.files import open_regular, write_text_atomic
from pytest_geo.llm.base import MAX_ANSWER_CHARS, ChatClient, ChatRequest, ChatResponse
from pytest_geo.llm.profiles import sent_body

CACHE_FORMAT = 2  # 2: keyed on the body as sent
STALE_TEMP_SECONDS = 3600  # a live writer's temp file is milliseconds old
MAX_ENTRY_BYTES = 8 << 20  # an answer is kilobytes; anything larger is not ours
MAX_TOKENS = 10**9  # per call; no context window comes near it
ENTRY_FIELDS = {"key": str, "model": str, "text": str, "prompt_tokens": int, "completion_tokens": int}
REJECTED = "rejected"  # `ResponseCache.read`: an entry is there, but not one `put` wrote


def cache_key(namespace: str, request: ChatRequest) -> str:
    """The request as sent (its body: model, messages and every parameter, llm/profiles.py)
    to the server named by `namespace`."""
    canonical = json.dumps(
        {"format": CACHE_FORMAT, "base_url": namespace, "body": sent_body(request)},
        sort_keys=True,
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def make_ignored_pytest_cache(directory: Path) -> None:
    """Create `.pytest_cache` as pytest would, git-ignored, when pytest-geo is the one
    creating it (egeo, or pytest with -p no:cacheprovider): pytest adds its .gitignore
    only when it creates the directory itself, and answers must not end up in a commit."""
    try:
        directory.mkdir()
        (directory / ".gitignore").write_text("# Created by pytest-geo.\n*\n", encoding="utf-8")
    except OSError:  # it exists (pytest's own, or ours), or cannot be made: the cache is best effort
        pass


class ResponseCache:
    """The directory of entries: `<dir>/<key[:2]>/<key>.json`."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)

    def path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.json"

    def remove_stale_temps(self, now: float | None = None) -> int:
        """Delete temp files that writers killed mid-write left behind; returns how many."""
        now = time.time() if now is None else now
        removed = 0
        for temp in self.directory.glob("??/.*.json.*.tmp"):
            try:
                if now - temp.stat().st_mtime > STALE_TEMP_SECONDS:
                    temp.unlink()
                    removed += 1
            except OSError:  # another run removed or replaced it first
                continue
        return removed

    def get(self, key: str) -> ChatResponse | None:
        """The entry, or None (a miss) when it is absent or rejected (see `read`)."""
        found = self.read(key)
        return found if isinstance(found, ChatResponse) else None

    def read(self, key: str) -> ChatResponse | str | None:
        """The entry; None when there is none; REJECTED when what is there is unreadable,
        corrupt, larger than MAX_ENTRY_BYTES, not a regular file (a FIFO or a link to
        /dev/zero planted in a shared cache must neither block the run nor fill its
        memory), or not exactly the fields `put` writes, with their types and bounds."""
        try:
            with open_regular(self.path(key)) as handle:
                data = handle.read(MAX_ENTRY_BYTES + 1)
        except FileNotFoundError:
            return None
        except OSError:
            return REJECTED
        try:
            entry: Any = json.loads(data.decode("utf-8")) if len(data) <= MAX_ENTRY_BYTES else None
        except ValueError:  # not UTF-8, not JSON, or an integer of more than 4,300 digits
            return REJECTED
        if not _is_entry(entry, key):
            return REJECTED
        return ChatResponse(text=entry["text"], prompt_tokens=entry["prompt_tokens"],
                            completion_tokens=entry["completion_tokens"], cached=True)

    def put(self, key: str, response: ChatResponse, model: str) -> None:
        """Best effort: a cache that cannot be written (read-only checkout, full disk)
        only costs a repeated call next time."""
        target = self.path(key)
        entry = {"key": key, "model": model, "text": response.text,
                 "prompt_tokens": response.prompt_tokens, "completion_tokens": response.completion_tokens}
        try:
            write_text_atomic(target, json.dumps(entry, ensure_ascii=False, sort_keys=True), durable=False)
        except OSError:
            return


def _is_entry(entry: Any, key: str) -> bool:
    """Exactly the fields `put` writes, each of its type (`type is`, so True is no token
    count), token counts in [0, MAX_TOKENS), and the key it is filed under."""
    if not isinstance(entry, dict) or entry.keys() != ENTRY_FIELDS.keys():
        return False
    if any(type(entry[name]) is not kind for name, kind in ENTRY_FIELDS.items()):
        return False
    return entry["key"] == key and all(0 <= entry[n] < MAX_TOKENS for n in ("prompt_tokens", "completion_tokens"))


class CachedClient:
    """Answers from the cache when it can, otherwise asks `inner` and stores the answer.

    Sits outside the concurrency bound, so a cache hit never waits for a request slot."""

    def __init__(self, inner: ChatClient, directory: Path, namespace: str) -> None:
        self.inner = inner
        self.cache = ResponseCache(directory)
        self.cache.remove_stale_temps()
        self.namespace = namespace

    async def complete(self, request: ChatRequest) -> ChatResponse:
        key = cache_key(self.namespace, request)
        found = self.cache.read(key)
        if isinstance(found, ChatResponse):
            return found
        response = await self.inner.complete(request)
        if response.finish_reason != "length" and len(response.text) <= MAX_ANSWER_CHARS:
            self.cache.put(key, response, request.model)
        return replace(response, cache_rejected=True) if found == REJECTED else response

    async def aclose(self) -> None:
        await self.inner.aclose()
