"""`--geo-batch`: the rows' model calls go through the OpenAI Batch API (about half the
token price, answers within the provider's completion window).

A client wrapper, so the engine does not change: every `complete()` joins the current
round and awaits its own future. A round closes when no new call has come for `window`
seconds (the rows in flight have all asked what they can ask before hearing back: for
a GEO row, rank_before and the rewrite; once those answers are in, rank_after forms the
next round). A round becomes one JSONL file (`files.create`), one batch
(`batches.create` on /v1/chat/completions), polled with a growing interval and a status
line whenever it changes, and its output and error files (`files.content`).

Each line's custom_id is the answer cache's key (`cache_key`), so the answers land in
the cache (the CachedClient above stores what `complete` returns) under the same keys as
ordinary calls, and a rerun replays them without a request. Which batch holds which keys
is written to `<cache dir>/batches/<batch id>.json` before polling starts and removed
once the batch's answers are handed out: a run interrupted while a batch is pending
finds it there and waits for that batch instead of paying for the same requests twice.

A line the server refused as sent (a 400 naming a parameter: temperature on a reasoning
model, max_tokens for max_completion_tokens) fails its call with RequestRefused, as a
direct call's 400 does, so the healing layer above (llm/healing.py) learns the change,
remembers it (llm/lessons.py) and sends that call again, healed: only the refused lines
go again, in the next round's batch. Lessons already known shape every line before it is
submitted. Any other failed line (an error line, a non-200 response, no line at all, a
batch that failed, expired or was cancelled before answering it) fails that call with a
ModelError, which becomes its row's `error: ...`; the other rows still score."""

from __future__ import annotations

import asyncio
import json
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_geo.data.files import write_text_atomic
from pytest_geo.llm.base import ChatRequest, ChatResponse, ModelError, RequestRefused
from pytest_geo.llm.cache import cache_key
from pytest_geo.llm.openai_client import NotAnAnswer, completion_fields
from pytest_geo.llm.profiles import Refusal, sent_body
from pytest_geo.text import shorten

# Roles whose calls come in rounds (every GEO row in flight asks at once). Suite prompt
# procedures ("procedure") are called one item at a time, so a round would hold one
# call and each item would wait for a whole batch: they go as ordinary calls.
BATCH_ROLES = frozenset({"ranker", "rewriter"})
ENDPOINT = "/v1/chat/completions"
COMPLETION_WINDOW = "24h"
ENDED = frozenset({"completed", "failed", "expired", "cancelled"})
STATE_DIR = "batches"


def print_status(line: str) -> None:
    """Batch progress on the real stderr: pytest's capture must not swallow it, since a
    batch can take hours."""
    stream = sys.__stderr__ or sys.stderr
    print(f"pytest-geo: {line}", file=stream, flush=True)


@dataclass
class PollPolicy:
    """Polls start quick (small batches finish in seconds) and back off to once a minute;
    a batch still not ended after `most` seconds of waiting fails its calls."""

    first: float = 0.5
    factor: float = 1.5
    longest: float = 60.0
    most: float = 25 * 3600.0  # the 24h completion window, and an hour for the provider to end it


class BatchError(Exception):
    """The batch machinery cannot go on; the message says why (it becomes each call's error)."""


# What a server's file or batch id may be (OpenAI's are `file-...`, `batch_...`): it goes into
# request paths and names a state file, so nothing that could leave a directory.
SERVER_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}")


def server_id(value: object, kind: str) -> str:
    """`value`, a server's id, when it is one; else BatchError naming it."""
    if isinstance(value, str) and SERVER_ID.fullmatch(value):
        return value
    shown = shorten(repr(value), 80)
    raise BatchError(f"the server's {kind} id {shown} is not an id (letters, digits, '_', '-', '.', ':')")


def _duration(seconds: float) -> str:
    return f"{seconds / 3600:g}h" if seconds >= 3600 else f"{seconds:g}s"


@dataclass
class _Call:
    request: ChatRequest
    futures: list[asyncio.Future[ChatResponse]] = field(default_factory=list)


@dataclass(frozen=True)
class Refused:
    """A line the server refused as sent (HTTP 400): why, and the error to learn from."""

    why: str
    refusal: Refusal


Outcome = ChatResponse | Refused | str  # an answer, a refusal, or why there is none


class BatchClient:
    """Wraps the OpenAI client (`OpenAIChatClient`): its SDK sends the batch requests."""

    def __init__(self, backend: Any, state_dir: Path | None, window: float = 0.2,
                 poll: PollPolicy | None = None, status: Callable[[str], None] = print_status) -> None:
        self.backend = backend
        self.base_url: str = backend.base_url
        self.sdk: Any = backend.sdk
        self.state_dir = state_dir
        self.window = window
        self.poll = poll or PollPolicy()
        self.status = status
        self.batches: list[str] = []  # ids of the batches this client waited for
        self._round: dict[str, _Call] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def complete(self, request: ChatRequest) -> ChatResponse:
        if request.role not in BATCH_ROLES:
            response: ChatResponse = await self.backend.complete(request)
            return response
        loop = asyncio.get_running_loop()
        future: asyncio.Future[ChatResponse] = loop.create_future()
        self._round.setdefault(cache_key(self.base_url, request), _Call(request)).futures.append(future)
        if self._timer is not None:
            self._timer.cancel()
        self._timer = loop.call_later(self.window, self._close_round)
        return await future

    def _close_round(self) -> None:
        self._timer = None
        calls, self._round = self._round, {}
        task = asyncio.get_running_loop().create_task(self._run_round(calls))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run_round(self, calls: dict[str, _Call]) -> None:
        try:
            outcomes = await self._outcomes(calls)
        except Exception as exc:  # the batch machinery failed: every call of the round fails with why
            reason = exc.args[0] if isinstance(exc, BatchError) else self.backend.describe(exc)
            outcomes = {key: f"batch request failed: {reason}" for key in calls}
        for key, call in calls.items():
            _hand_out(call, outcomes.get(key, "no result in the batch"))

    async def _outcomes(self, calls: dict[str, _Call]) -> dict[str, Outcome]:
        """Each call's outcome: from a pending batch that holds it (an interrupted run's),
        else from the one new batch the rest are submitted in."""
        waits = []
        left = dict(calls)
        for batch_id, keys in self._pending_batches():
            mine = [key for key in keys if key in left]
            if mine:
                self.status(f"batch {batch_id}: resuming ({len(mine)} of this round's requests)")
                waits.append(self._collect(batch_id, mine))
                for key in mine:
                    del left[key]
        if left:
            batch_id = await self._submit(left)
            waits.append(self._collect(batch_id, list(left)))
        outcomes: dict[str, Outcome] = {}
        for found in await asyncio.gather(*waits):
            outcomes.update(found)
        return outcomes

    async def _submit(self, calls: dict[str, _Call]) -> str:
        lines = "".join(
            json.dumps({"custom_id": key, "method": "POST", "url": ENDPOINT,
                        "body": sent_body(call.request)}, ensure_ascii=False) + "\n"
            for key, call in calls.items()
        )
        uploaded = await self.sdk.files.create(file=("pytest-geo-batch.jsonl", lines.encode("utf-8")), purpose="batch")
        batch = await self.sdk.batches.create(input_file_id=server_id(uploaded.id, "file"), endpoint=ENDPOINT,
                                              completion_window=COMPLETION_WINDOW)
        batch_id = server_id(batch.id, "batch")
        self._remember(batch_id, list(calls))
        self.status(f"batch {batch_id}: submitted {len(calls)} requests")
        return batch_id

    async def _collect(self, batch_id: str, keys: list[str]) -> dict[str, Outcome]:
        """Poll until the batch ends, then read its answers for `keys`."""
        self.batches.append(batch_id)
        batch = await self._wait(batch_id)
        found: dict[str, Outcome] = {}
        for file_id in (batch.error_file_id, batch.output_file_id):
            if file_id:
                found.update(self._parse(await self._read(server_id(file_id, "file")), batch_id))
        if batch.status != "completed":
            for key in keys:
                found.setdefault(key, f"batch {batch_id} {batch.status} before answering")
        self._forget(batch_id)
        return {key: found.get(key, f"no result in batch {batch_id}") for key in keys}

    async def _wait(self, batch_id: str) -> Any:
        """The batch once it has ended, polled with a growing interval and a status line
        whenever it changes; BatchError once the policy's bound passes (it stays on disk:
        a rerun resumes waiting for it)."""
        delay, shown, waited = self.poll.first, "", 0.0
        while True:
            batch = await self.sdk.batches.retrieve(batch_id)
            counts = getattr(batch, "request_counts", None)
            line = f"batch {batch_id}: {batch.status}"
            if counts is not None:
                line += f" ({counts.completed} of {counts.total} done, {counts.failed} failed)"
            if line != shown:
                self.status(line)
                shown = line
            if batch.status in ENDED:
                return batch
            if waited >= self.poll.most:
                raise BatchError(f"batch {batch_id} still {batch.status} after {_duration(waited)} of waiting, the "
                                 "most a batch is waited for; a rerun resumes waiting for it")
            await asyncio.sleep(delay)
            waited += delay
            delay = min(delay * self.poll.factor, self.poll.longest, max(self.poll.most - waited, 0.0))

    async def _read(self, file_id: str) -> str:
        content = await self.sdk.files.content(file_id)
        text: str = content.text
        return text

    def _parse(self, text: str, batch_id: str) -> dict[str, Outcome]:
        scrub: Callable[[str], str] = self.backend.scrub
        redact: Callable[[str], str] = self.backend.redact
        refusal: Callable[[object], Refusal] = self.backend.refusal
        found: dict[str, Outcome] = {}
        for raw in text.splitlines():
            try:
                line = json.loads(raw)
                key = line["custom_id"]
            except (ValueError, KeyError, TypeError):
                continue
            found[key] = _outcome(line, batch_id, scrub, redact, refusal)
        return found

    # Batch ids on disk, so an interrupted run resumes instead of paying twice.

    def _state(self, batch_id: str) -> Path | None:
        return self.state_dir / STATE_DIR / f"{batch_id}.json" if self.state_dir is not None else None

    def _remember(self, batch_id: str, keys: list[str]) -> None:
        path = self._state(batch_id)
        if path is not None:
            try:
                write_text_atomic(path, json.dumps({"batch_id": batch_id, "base_url_keys": keys}))
            except OSError:  # best effort, like the cache: only a resume is lost
                pass

    def _forget(self, batch_id: str) -> None:
        path = self._state(batch_id)
        if path is not None:
            path.unlink(missing_ok=True)

    def _pending_batches(self) -> list[tuple[str, list[str]]]:
        """The batches an interrupted run left pending: each file's id, checked as a
        server's id is, and the keys it holds."""
        if self.state_dir is None:
            return []
        pending = []
        for path in sorted((self.state_dir / STATE_DIR).glob("*.json")):
            try:
                entry = json.loads(path.read_text(encoding="utf-8"))
                batch_id, keys = entry["batch_id"], entry["base_url_keys"]
            except (OSError, ValueError, KeyError, TypeError):
                continue
            if isinstance(batch_id, str) and SERVER_ID.fullmatch(batch_id) and isinstance(keys, list) \
                    and path.stem == batch_id:
                pending.append((batch_id, [k for k in keys if isinstance(k, str)]))
        return pending

    async def aclose(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        for task in list(self._tasks):
            task.cancel()
        await self.backend.aclose()


def _hand_out(call: _Call, outcome: Outcome) -> None:
    """Settle every future waiting on `call` with its outcome."""
    for future in call.futures:
        if future.done():
            continue
        if isinstance(outcome, ChatResponse):
            future.set_result(outcome)
        elif isinstance(outcome, Refused):  # healing.py may send it again, changed
            future.set_exception(RequestRefused(f"{call.request.role} model call failed: {outcome.why}",
                                                outcome.refusal))
        else:
            future.set_exception(ModelError(f"{call.request.role} model call failed: {outcome}"))


def _outcome(line: dict[str, Any], batch_id: str, scrub: Callable[[str], str],
             redact: Callable[[str], str], refusal: Callable[[object], Refusal]) -> Outcome:
    """One output or error line: the answer (redacted as a live one is), a refusal, or
    why there is none."""
    error = line.get("error")
    response = line.get("response") or {}
    if error:
        message = error.get("message") if isinstance(error, dict) else str(error)
        return f"batch {batch_id}: line failed ({scrub(str(message))})"
    status = response.get("status_code")
    body = response.get("body") or {}
    if status != 200:
        detail = body.get("error", {}).get("message") if isinstance(body.get("error"), dict) else None
        why = f"batch {batch_id}: HTTP {status}" + (f" ({scrub(str(detail))})" if detail else "")
        if status == 400:
            return Refused(why, refusal(body))
        return why
    try:
        fields = completion_fields(body)
    except NotAnAnswer as exc:
        return f"batch {batch_id}: {scrub(str(exc))}"
    return ChatResponse(text=redact(fields.text), prompt_tokens=fields.prompt_tokens,
                        completion_tokens=fields.completion_tokens, batch=True, finish_reason=fields.finish_reason,
                        usage_reported=fields.usage_reported, cached_input_tokens=fields.cached_input_tokens,
                        cache_write_tokens=fields.cache_write_tokens)
