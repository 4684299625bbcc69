"""Requests shaped for what each model accepts, and healed when a server refuses one.

This layer sits above the answer cache: every request is shaped here into the body that
is sent (llm/profiles.py), so the cache keys on what was sent and the backend posts it.
A 400 that names a parameter we sent teaches a lesson for that model: the call goes
again without it (or under the name the server asks for), and so does every later call
of that model in this process. Until a model's first call has come back, its calls go
one at a time (except for OpenAI's chat models, whose contract is settled), so a refused
parameter costs one refused call per model and process, not one per call in flight.

A 400 no change fixes fails its call; before any call succeeded it means the run cannot
work, and the breaker (llm/breaker.py) stops it with the server's message."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import fields, replace
from typing import Any

from pytest_geo.llm.base import ChatClient, ChatRequest, ChatResponse, ModelError, RequestRefused
from pytest_geo.llm.profiles import (
    ROW_CODES,
    Lesson,
    ShapedRequest,
    apply_lessons,
    family,
    lesson_for,
    request_body,
    with_cache_mark,
)

STRUCTURED_PARAM = "response_format"

# (the call's request, the 400 it got, why no change fixes it, whether it fails the run
# whatever came before): the breaker's `refused`.
OnUnfixable = Callable[[ChatRequest, ModelError, str, bool], None]


REQUEST_FIELDS = tuple(f.name for f in fields(ChatRequest))


def shaped(request: ChatRequest, body: dict[str, Any]) -> ShapedRequest:
    """`request`'s fields as they are, with `body`."""
    return ShapedRequest(**{name: getattr(request, name) for name in REQUEST_FIELDS}, body=body)


class HealingClient:
    """Shapes each request for its model and heals refused parameters (see the module).

    `structured`: --geo-structured; "auto" drops a refused response format like any
    other parameter, "on" makes its refusal fail the run, "off" never sends one.
    `reasoning_effort`: the run's --geo-reasoning-effort, for requests that set none.
    `lessons`: changes already known (remembered from earlier runs, llm/lessons.py);
    `on_learn` hears each new one.
    `probe`: send a model's first call alone (not under the Batch API, where a call
    alone is a whole batch: there each refused line of a batch is sent again, healed)."""

    def __init__(self, inner: ChatClient, structured: str = "auto", reasoning_effort: str | None = None,
                 lessons: Iterable[Lesson] = (), on_unfixable: OnUnfixable | None = None,
                 probe: bool = True, on_learn: Callable[[Lesson], None] | None = None,
                 cache_marks: tuple[str, ...] = ()) -> None:
        self.inner = inner
        self.cache_marks = cache_marks  # models whose long system prompts are marked for caching
        self.structured = structured
        self.reasoning_effort = reasoning_effort
        self.on_unfixable = on_unfixable
        self.probe = probe
        self.on_learn = None  # lessons given here are already known where they came from
        self._lessons: dict[str, dict[str, Lesson]] = {}  # model -> param -> lesson
        self.learned: list[Lesson] = []  # every change applied in this process, in order
        for lesson in lessons:
            if not (lesson.param == STRUCTURED_PARAM and structured == "on"):  # on: asked for, whatever was learned
                self._learn(lesson)
        self.on_learn = on_learn
        self._settled: set[str] = set()  # models whose first call came back
        self._probes: dict[str, asyncio.Lock] = {}

    def shape(self, request: ChatRequest) -> ShapedRequest:
        """`request` with the body it is sent with: the table's, with what was learned."""
        if request.reasoning_effort is None and self.reasoning_effort is not None:
            request = replace(request, reasoning_effort=self.reasoning_effort)
        body = request_body(request, structured=self.structured != "off")
        if request.model.startswith(self.cache_marks):
            body = with_cache_mark(body)
        return shaped(request, apply_lessons(body, self._lessons.get(request.model, {})))

    async def complete(self, request: ChatRequest) -> ChatResponse:
        model = request.model
        if self.probe and model not in self._settled and family(model, request.reasoning_effort) != "chat":
            probe = self._probes.setdefault(model, asyncio.Lock())
            async with probe:  # the first calls of a model, one at a time
                if model not in self._settled:
                    return await self._send(request)
        return await self._send(request)

    async def _send(self, request: ChatRequest) -> ChatResponse:
        """Send; on a refused parameter, learn and send again, once per parameter."""
        resent: set[str] = set()
        while True:
            sent = self.shape(request)
            try:
                response = await self.inner.complete(sent)
            except RequestRefused as exc:
                lesson = lesson_for(exc.refusal, sent.body)
                if lesson is not None and lesson.param in self._lessons.get(lesson.model, {}):
                    if lesson.param not in resent:  # shaped before a call in flight learned it: as now shaped
                        resent.add(lesson.param)
                        continue
                    lesson = None  # refused again after the change: not ours to fix
                if lesson is None or (lesson.param == STRUCTURED_PARAM and self.structured == "on"):
                    self._unfixable(sent, exc, lesson)
                    raise
                self._learn(lesson)
                continue
            except ModelError:
                self._settled.add(request.model)  # a failure that says nothing of the parameters
                raise
            self._settled.add(request.model)
            return response

    def _unfixable(self, request: ChatRequest, exc: RequestRefused, lesson: Lesson | None) -> None:
        if self.on_unfixable is None or exc.refusal.code in ROW_CODES:
            return
        if lesson is not None:  # a response format refused under --geo-structured on
            why = "the server refused response_format, which --geo-structured on requires"
            self.on_unfixable(request, exc, why, True)
        else:
            self.on_unfixable(request, exc, "the server refused the request as sent", False)

    def _learn(self, lesson: Lesson) -> None:
        known = self._lessons.setdefault(lesson.model, {})
        if lesson.param not in known:
            known[lesson.param] = lesson
            self.learned.append(lesson)
            if self.on_learn is not None:
                self.on_learn(lesson)

    def lessons_json(self) -> list[dict[str, Any]]:
        """What was learned, as plain data (it crosses to an xdist controller)."""
        return [lesson.as_json() for lesson in self.learned]

    async def aclose(self) -> None:
        await self.inner.aclose()
