"""Each model call's answer bounded in time and size while it is read.

The SDK's timeout bounds each socket operation, so a server sending a byte a second held a
call forever; and it buffers a body whole before parsing it, so an endless chunked body or
a gzip bomb filled memory. Here every response's body (`bound_body`, from the response
hook) is read through a stream that must have it whole within the timeout of its headers
(else the attempt fails as a read timeout, which the SDK retries as it retries its own),
that decompresses gzip and deflate itself, counting bytes before and after decompression,
and that stops at `cap`. Each attempt (`attempt_started`, from the request hook) also has
a backstop, `backstop(seconds)` after its request, for headers trickled a byte at a time:
it ends the call (`bounded_call` raises TimeoutError).

Waits of our own (a rate limit's pause between the headers and the body, the SDK's backoff
between attempts, once the body is read) are not under the deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import zlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx2

# An answer is at most MAX_ANSWER_CHARS (llm/base.py) characters, each at most six bytes as a
# JSON escape, with the completion's other fields around it.
MAX_BODY_BYTES = 8 << 20
BACKSTOP_SLACK = 10.0  # seconds beyond two timeouts (headers, then body) before the backstop ends a call


def backstop(seconds: float) -> float:
    """How long after its request an attempt may go on: its headers (the SDK's read timeout
    of `seconds`, after waiting for a connection) and its body (`seconds`), with slack."""
    return 2 * seconds + BACKSTOP_SLACK


# zlib's window bits per content coding: gzip's header, or zlib's (deflate as HTTP means it).
WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


class AnswerTooLarge(BaseException):
    """A body over the cap. A BaseException, like the deadline's cancellation: the SDK
    retries any Exception raised while a body is read, and a body over the cap would only
    be read again."""


@dataclass
class _Bounds:
    deadline: asyncio.Timeout  # the backstop: ends the call
    seconds: float
    cap: int


_current: contextvars.ContextVar[_Bounds | None] = contextvars.ContextVar("geo_call_bounds", default=None)


@contextlib.asynccontextmanager
async def bounded_call(seconds: float, cap: int = MAX_BODY_BYTES) -> AsyncIterator[None]:
    """Run the call inside under the bounds; raises TimeoutError when an attempt goes on
    past its backstop, AnswerTooLarge when a body is over `cap` bytes."""
    async with asyncio.timeout(None) as deadline:
        token = _current.set(_Bounds(deadline, seconds, cap))
        try:
            yield
        finally:
            _current.reset(token)


def attempt_started() -> None:
    """A request of the call is about to be sent: the backstop starts."""
    bounds = _current.get()
    if bounds is not None:
        bounds.deadline.reschedule(asyncio.get_running_loop().time() + backstop(bounds.seconds))


def paused() -> None:
    """A wait of our own begins: not under the deadline (`attempt_started` restarts it)."""
    bounds = _current.get()
    if bounds is not None:
        bounds.deadline.reschedule(None)


def bound_body(response: Any) -> None:
    """Read `response`'s body (an httpx2 response whose headers just came) within the
    call's bounds; a body of another call (the Batch API's files) is left as it is."""
    bounds = _current.get()
    if bounds is None or not isinstance(response.stream, httpx2.AsyncByteStream):
        return
    coding = response.headers.get("content-encoding", "")
    names = [name.strip().lower() for name in coding.split(",") if name.strip().lower() not in ("", "identity")]
    if all(name in WBITS for name in names):  # else httpx2 decodes it (or refuses it), bounded before
        response.headers.pop("content-encoding", None)
    else:
        names = []
    due = asyncio.get_running_loop().time() + bounds.seconds
    response.stream = _BoundedStream(response.stream, names, bounds, due)


class _BoundedStream(httpx2.AsyncByteStream):
    def __init__(self, inner: httpx2.AsyncByteStream, codings: list[str], bounds: _Bounds, due: float) -> None:
        self.inner = inner
        self.codings = codings
        self.bounds = bounds
        self.due = due  # loop time by which the body must have arrived whole

    async def __aiter__(self) -> AsyncIterator[bytes]:
        cap = self.bounds.cap
        inflaters = [zlib.decompressobj(WBITS[name]) for name in reversed(self.codings)]
        read = given = 0
        chunks = self.inner.__aiter__()
        while True:
            try:
                async with asyncio.timeout_at(self.due):
                    chunk = await anext(chunks)
            except StopAsyncIteration:
                break
            except TimeoutError:
                raise httpx2.ReadTimeout(f"the whole body had not arrived within {self.bounds.seconds:g}s") from None
            read += len(chunk)
            if read > cap:
                raise AnswerTooLarge(f"more than {cap:,} bytes")
            for inflater in inflaters:
                chunk = _inflate(inflater, chunk, cap - given, cap)
            given += len(chunk)
            yield chunk
        self.bounds.deadline.reschedule(None)  # read whole: the SDK's backoff is not the server's time

    async def aclose(self) -> None:
        await self.inner.aclose()


def _inflate(inflater: Any, data: bytes, room: int, cap: int) -> bytes:
    """`data` decompressed, at most `room` bytes of it, else AnswerTooLarge."""
    try:
        out: bytes = inflater.decompress(data, room + 1)
    except zlib.error as exc:
        raise httpx2.DecodingError(f"the answer's compressed body is corrupt ({exc})") from None
    if len(out) > room or inflater.unconsumed_tail:
        raise AnswerTooLarge(f"more than {cap:,} bytes once decompressed")
    return out
