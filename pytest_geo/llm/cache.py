"""An on-disk cache of model answers, as a wrapper around any client.

Kept hand-written, append-only segments (issue 36): one `write` an answer, no file each.
Hand-written rather than `diskcache`: diskcache pickles values, so a cache directory
shared between CI jobs would become a code-execution vector. Entries are JSON lines
appended to segment files, `<dir>/answers/<n>.jsonl`: creating a file per answer cost
the kernel more CPU than everything else the cache does (README, "Client CPU per model
call"), where an append to an open file costs next to nothing. Each process appends to a segment no other
process holds (an exclusive `flock` for its lifetime), each entry in one `write` of one
whole line, so xdist workers and parallel runs never interleave, and a process killed
mid-write leaves at most a torn last line: never indexed, or, once the next holder ends
it with a newline, a line that is rejected like any corrupt entry. Segments are only ever
appended to. The index (key -> where its line is) is built on first use by reading the
segments, and on a miss the segments that grew since (another process's answers) are
read again, so a worker sees what another wrote meanwhile.

What is read is bounded, since a cache directory may be shared or planted: only files
named as a writer names them (`<n>.jsonl`, n < MAX_SEGMENTS), and of each at most
MAX_SEGMENT_BYTES (a writer moves on to the next segment before its own would pass that,
so only a planted file, such as a sparse one of 20 GB, is larger: said once, never
written to). An `answers/` that is a symbolic link is neither read nor written (said
once): segments are opened by name in it, so every answer would go where it points.

Entries written by earlier versions, one JSON file per key at `<dir>/<key[:2]>/<key>.json`,
are still read on a miss in the segments (their writers' temp files, left by a kill, are
removed once an hour old). An entry that cannot be read or parsed, or whose fields are
not what `put` writes (a planted `prompt_tokens` of 10**400 would fail every row reading
it, one of 10**30 would claim trillions saved), is rejected: a miss, superseded by the
live answer appended after it and counted (`cache_rejected` in the usage).

The key covers the base URL and the body as sent (model, messages and every parameter
the model's profile sent, after any change a refusal taught: llm/healing.py; so the output
cap and the response schema too). It never includes the API key (answers do not depend
on it, and keys must not reach disk) nor `ChatRequest.context` (the mock's input, not what
a server sees). Errors are not cached, nor answers that cannot be used whatever is asked
next: one cut at the output cap, over the answer size cap (MAX_ANSWER_CHARS), or, asked
for JSON, holding none (`usable`): the next run asks those again.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import stat
import sys
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pytest_geo.data.files import open_regular, write_all
from pytest_geo.llm.base import MAX_ANSWER_CHARS, ChatClient, ChatRequest, ChatResponse, is_token_count
from pytest_geo.llm.file_lock import lock, locks_available
from pytest_geo.llm.profiles import sent_json

CACHE_FORMAT = 2  # 2: keyed on the body as sent
STALE_TEMP_SECONDS = 3600  # a live writer's temp file is milliseconds old
MAX_ENTRY_BYTES = 8 << 20  # an answer is kilobytes; anything larger is not ours
ENTRY_FIELDS = {"key": str, "model": str, "text": str, "prompt_tokens": int, "completion_tokens": int}
REJECTED = "rejected"  # `ResponseCache.read`: an entry is there, but not one `put` wrote
SEGMENTS = "answers"
SEGMENT_SUFFIX = ".jsonl"
MAX_SEGMENTS = 1024  # processes writing one cache at once
SEGMENT_NAME = re.compile(r"[0-9]{1,4}\.jsonl")  # as a writer names one, `<n>.jsonl`: no other file is read
LINE_PREFIX = b'{"key":"'  # how `put` starts a line: the key, then the other fields
KEY_END = len(LINE_PREFIX) + 64  # a sha256 in hex
READ_CHUNK = MAX_ENTRY_BYTES + 1  # a chunk holds any whole entry and its newline
# What is read of one segment: tens of thousands of entries. A writer moves on to the next
# segment before its own would pass it, so only a planted file is larger (a sparse one of
# 20 GB costs no disk, yet reading it took a minute on every run).
MAX_SEGMENT_BYTES = 64 << 20


def cache_key(namespace: str, request: ChatRequest) -> str:
    """The request as sent (its body: model, messages and every parameter, llm/profiles.py)
    to the server named by `namespace`: the SHA-256 of
    `{"base_url":<namespace>,"body":<body>,"format":2}` as compact, key-sorted UTF-8 JSON,
    hashed around the very bytes the body is posted as (`sent_json`), so it is not encoded
    twice."""
    hashed = _key_start(namespace).copy()
    hashed.update(sent_json(request))
    hashed.update(b',"format":%d}' % CACHE_FORMAT)
    return hashed.hexdigest()


@functools.lru_cache(maxsize=8)  # a run has one server
def _key_start(namespace: str) -> hashlib._Hash:
    """The hash fed with what every key of `namespace` starts with, to be copied."""
    return hashlib.sha256(b'{"base_url":' + json.dumps(namespace, ensure_ascii=False).encode("utf-8") + b',"body":')


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
    """Segments of entries under `<dir>/answers/`, and the legacy per-key files
    `<dir>/<key[:2]>/<key>.json` (read only). Safe to share between threads."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.segments_dir = self.directory / SEGMENTS
        self._lock = threading.Lock()
        self._index: dict[str, Location] | None = None  # key -> its last line
        self._older: dict[str, list[Location]] = {}  # key -> its earlier lines, for the few keys with more
        self._segments: dict[str, _Segment] = {}  # by file name
        self._skipped: set[str] = set()  # names that are not regular files: never read
        self._listed: int | None = None  # the segments directory's mtime when last listed
        self._writer: _Segment | None = None
        self._unwritable = False
        self._legacy = False  # does the directory hold an earlier version's entries (looked at once)
        self._refused = False  # the segments directory is a link: said once, never used

    def path(self, key: str) -> Path:
        """Where an earlier version kept the entry (read on a miss in the segments)."""
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
        with self._lock:
            at = self._find(key)
            older = self._older.get(key, [])
        if at is None:
            return self._read_legacy(key) if self._legacy else None
        found = _entry(_pread(at), key)
        for other in reversed(older):  # an earlier line for the key, when the last is rejected
            if isinstance(found, ChatResponse):
                break
            found = _entry(_pread(other), key)
        return found

    def put(self, key: str, response: ChatResponse, model: str) -> None:
        """Best effort: a cache that cannot be written (read-only checkout, full disk)
        only costs a repeated call next time."""
        entry = {"key": key, "model": model, "text": response.text,
                 "prompt_tokens": response.prompt_tokens, "completion_tokens": response.completion_tokens}
        line = json.dumps(entry, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"
        with self._lock:
            index = self._loaded()
            if self._writer is not None and self._writer.pid != os.getpid():
                self._writer = None  # a forked child shares the parent's lock: it takes its own segment
            writer = self._writer or self._open_writer()
            if writer is not None and writer.scanned + len(line) > MAX_SEGMENT_BYTES:
                writer = self._open_writer()  # this one is full; it stays locked, so it is not taken again
            if writer is None:
                return
            offset = writer.scanned
            try:
                write_all(writer.fd, line)
            except OSError:
                self._unwritable = True  # a full disk: the rest of the run writes nothing
                return
            writer.scanned = offset + len(line)
            index[key] = (writer, offset, len(line) - 1)

    def keys(self) -> set[str]:
        """The keys with a line in the segments (what a run wrote; tests count them)."""
        with self._lock:
            if self._index is not None:
                self._read_new_lines()
            return set(self._loaded())

    def close(self) -> None:
        with self._lock:
            for segment in self._segments.values():
                os.close(segment.fd)
            self._segments.clear()
            self._older.clear()
            self._writer = None
            self._index = None
            self._listed = None

    def _loaded(self) -> dict[str, Location]:
        if self._index is None:
            self._index = {}
            self._legacy = _has_shards(self.directory)
            self._read_new_lines()
        return self._index

    def _find(self, key: str) -> Location | None:
        index = self._loaded()
        at = index.get(key)
        if at is None:  # written by another process since we looked?
            self._read_new_lines()
            at = index.get(key)
        return at

    def _read_new_lines(self) -> None:
        """Index the lines appended since the last look, and any new segment's."""
        try:
            found = os.lstat(self.segments_dir)
        except OSError:
            return
        if self._is_link(found):
            return
        listed = found.st_mtime_ns
        if listed != self._listed:
            self._listed = listed
            self._open_new_segments()
        for segment in self._segments.values():
            if segment is not self._writer:
                self._index_lines(segment)

    def _open_new_segments(self) -> None:
        try:
            names = sorted(entry.name for entry in os.scandir(self.segments_dir) if SEGMENT_NAME.fullmatch(entry.name)
                           and int(entry.name.removesuffix(SEGMENT_SUFFIX)) < MAX_SEGMENTS)
        except OSError:
            return
        for name in names:
            if name in self._segments or name in self._skipped:
                continue
            try:
                with open_regular(self.segments_dir / name) as handle:
                    fd = os.dup(handle.fileno())
            except OSError:  # a FIFO, a device, a directory, gone meanwhile
                self._skipped.add(name)
                continue
            self._segments[name] = _Segment(name, fd)

    def _index_lines(self, segment: _Segment) -> None:
        """Read `segment` from where the last look stopped; index each whole line that
        starts as `put` writes one. An unfinished last line (a write in progress, or a
        writer killed mid-line) is left for a later look."""
        try:
            size = os.fstat(segment.fd).st_size
        except OSError:
            return
        if size > MAX_SEGMENT_BYTES:
            size = self._oversized(segment, size)
        index = self._loaded()
        while segment.scanned < size:
            chunk = os.pread(segment.fd, min(size - segment.scanned, READ_CHUNK), segment.scanned)
            if not chunk:
                return
            start = 0
            while (end := chunk.find(b"\n", start)) != -1:
                if chunk.startswith(LINE_PREFIX, start) and chunk[start + KEY_END:start + KEY_END + 1] == b'"':
                    key = chunk[start + len(LINE_PREFIX):start + KEY_END].decode("ascii", "replace")
                    if key in index:  # kept: a later line may be rejected (planted, torn)
                        self._older.setdefault(key, []).append(index[key])
                    index[key] = (segment, segment.scanned + start, end - start)
                start = end + 1
            if start == 0:  # no line ends in this chunk: a line longer than any entry
                if len(chunk) < READ_CHUNK:
                    return  # unfinished: look again later
                segment.scanned = self._skip_line(segment, segment.scanned + len(chunk), size)
                continue
            segment.scanned += start

    def _oversized(self, segment: _Segment, size: int) -> int:
        """How much of a segment larger than any writer makes is read: MAX_SEGMENT_BYTES
        (its lines past that are never indexed); said once per segment."""
        if not segment.oversized:
            segment.oversized = True
            _warn(f"the answer cache's segment {self.segments_dir / segment.name} holds {size:,} bytes, more than "
                  f"a writer puts in one ({MAX_SEGMENT_BYTES:,}): only its first {MAX_SEGMENT_BYTES:,} are read, "
                  "and it is never written to; remove it if you did not put it there")
        return MAX_SEGMENT_BYTES

    def _is_link(self, found: os.stat_result) -> bool:
        """Whether the segments directory is a symbolic link: then it is neither read nor
        written (said once). Every segment is opened by its name in it, so a link there would
        send every answer to wherever it points."""
        if not stat.S_ISLNK(found.st_mode):
            return False
        if not self._refused:
            self._refused = True
            self._unwritable = True
            try:
                target = os.readlink(self.segments_dir)
            except OSError:
                target = "?"
            _warn(f"the answer cache's directory {self.segments_dir} is a symbolic link (to {target}): answers are "
                  "neither read from it nor written to it; remove the link to use the cache")
        return True

    @staticmethod
    def _skip_line(segment: _Segment, offset: int, size: int) -> int:
        """Past the end of an over-long line (it is never indexed: its key, if any, misses)."""
        while offset < size:
            chunk = os.pread(segment.fd, min(size - offset, READ_CHUNK), offset)
            if not chunk:
                break
            end = chunk.find(b"\n")
            if end != -1:
                return offset + end + 1
            offset += len(chunk)
        return offset

    def _open_writer(self) -> _Segment | None:
        """This process's segment: the first `<n>.jsonl` no live process holds, held with
        an exclusive lock until the process ends. None when none can be had."""
        if self._unwritable or not locks_available():  # no fcntl (Windows): answers are not kept
            return None
        try:
            self.segments_dir.mkdir(parents=True, exist_ok=True)
            if self._is_link(os.lstat(self.segments_dir)):  # mkdir follows a link to a directory
                return None
        except OSError:
            self._unwritable = True
            return None
        flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
        for number in range(MAX_SEGMENTS):
            name = f"{number}{SEGMENT_SUFFIX}"
            if name in self._skipped:
                continue
            try:
                fd = os.open(self.segments_dir / name, flags, 0o666)
            except OSError:  # a link planted there (O_NOFOLLOW), no permission: not ours to write
                continue
            try:
                found = os.fstat(fd)
                if not stat.S_ISREG(found.st_mode) or found.st_size >= MAX_SEGMENT_BYTES:  # full, or not ours
                    os.close(fd)
                    continue
                lock(fd, wait=False)
            except OSError:  # held by another process
                os.close(fd)
                continue
            os.set_blocking(fd, True)
            return self._take(name, fd)
        self._unwritable = True
        return None

    def _take(self, name: str, fd: int) -> _Segment | None:
        """Make the locked segment `name` (open as `fd`) this process's: index what its
        earlier holders wrote, and end a line a killed one left unfinished."""
        segment = self._segments.get(name)
        if segment is None:
            segment = self._segments[name] = _Segment(name, fd)
        else:  # indexed already: read on through the locked descriptor
            os.close(segment.fd)
            segment.fd = fd
        self._index_lines(segment)
        try:
            size = os.fstat(fd).st_size
            if size > segment.scanned:  # an unfinished last line
                write_all(fd, b"\n")
                self._index_lines(segment)
        except OSError:
            self._unwritable = True
            return None
        segment.pid = os.getpid()
        self._writer = segment
        return segment

    def _read_legacy(self, key: str) -> ChatResponse | str | None:
        try:
            with open_regular(self.path(key)) as handle:
                data = handle.read(MAX_ENTRY_BYTES + 1)
        except FileNotFoundError:
            return None
        except OSError:
            return REJECTED
        return _entry(data, key)


@dataclass
class _Segment:
    name: str
    fd: int
    scanned: int = 0  # where the next unread line starts
    pid: int = 0  # the process that locked it to write, if one of ours did
    oversized: bool = False  # larger than MAX_SEGMENT_BYTES, and said so


def _warn(line: str) -> None:
    """On the real stderr, as batch progress is: pytest's capture must not swallow it."""
    print(f"pytest-geo: warning: {line}", file=sys.__stderr__ or sys.stderr, flush=True)


Location = tuple[_Segment, int, int]  # (segment, offset, length) of an entry's line
HEX = frozenset("0123456789abcdef")
LONE_SURROGATE = re.compile("[\ud800-\udfff]")  # in an entry's text: no report could encode it


def _has_shards(directory: Path) -> bool:
    """Whether `directory` holds an earlier version's shards (`<key[:2]>/`): when it does
    not, a miss in the segments is not looked for again there (an open per call)."""
    try:
        with os.scandir(directory) as entries:
            return any(len(e.name) == 2 and set(e.name) <= HEX and e.is_dir() for e in entries)
    except OSError:
        return False


def _pread(at: Location) -> bytes | None:
    segment, offset, length = at
    try:
        return os.pread(segment.fd, length, offset)
    except OSError:  # closed meanwhile, or unreadable
        return None


def _entry(data: bytes | None, key: str) -> ChatResponse | str:
    """The entry `data` holds for `key`, or REJECTED (also when it could not be read)."""
    if data is None or len(data) > MAX_ENTRY_BYTES:
        return REJECTED
    try:
        entry: Any = json.loads(data.decode("utf-8"))
    except ValueError:  # not UTF-8, not JSON, or an integer of more than 4,300 digits
        return REJECTED
    if not _is_entry(entry, key):
        return REJECTED
    return ChatResponse(text=entry["text"], prompt_tokens=entry["prompt_tokens"],
                        completion_tokens=entry["completion_tokens"], cached=True)


def _is_entry(entry: Any, key: str) -> bool:
    """Exactly the fields `put` writes, each of its type (`type is`, so True is no token
    count), token counts in [0, MAX_TOKENS), and the key it is filed under."""
    if not isinstance(entry, dict) or entry.keys() != ENTRY_FIELDS.keys():
        return False
    if any(type(entry[name]) is not kind for name, kind in ENTRY_FIELDS.items()):
        return False
    return (entry["key"] == key and all(is_token_count(entry[n]) for n in ("prompt_tokens", "completion_tokens"))
            and (entry["text"].isascii() or LONE_SURROGATE.search(entry["text"]) is None))


def usable(request: ChatRequest, response: ChatResponse) -> bool:
    """Whether an answer is worth keeping: not cut at the output cap, within the answer
    size cap, and, for a request asking for JSON in a schema's shape, holding a JSON object
    with the schema's required fields. A gateway's "overloaded" or a refusal in prose
    replayed from the cache would fail its row on every rerun without a request made."""
    if response.finish_reason == "length" or len(response.text) > MAX_ANSWER_CHARS:
        return False
    schema = request.response_schema
    if schema is None:
        return True
    from pytest_geo.llm.answer_json import AnswerError, extract_json_object

    required = [name for name in schema.get("required", ()) if isinstance(name, str)]
    try:
        found = extract_json_object(response.text, required[0] if required else None)
    except AnswerError:
        return False
    return all(name in found for name in required)


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
        if usable(request, response):
            self.cache.put(key, response, request.model)
        return replace(response, cache_rejected=True) if found == REJECTED else response

    async def aclose(self) -> None:
        try:
            await self.inner.aclose()
        finally:
            self.cache.close()
