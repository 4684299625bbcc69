"""Procedures that are prompts: a `{{placeholder}}` template sent to the model, whose
answer is the procedure's output. A suite named after one scores it like any procedure,
and one marked `optimize=True` can be searched by `egeo optimize-prompts --suites FILE`."""

from __future__ import annotations

import contextvars
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from pytest_geo.llm.base import ChatRequest
from pytest_geo.settings import DEFAULT_MAX_OUTPUT_TOKENS, OUTPUT_CAP_FLAGS
from pytest_geo.templates import PromptError, placeholders, render

if TYPE_CHECKING:
    from pytest_geo.engine.session import GeoSession

PROCEDURE_ROLE = "procedure"  # answered by the rewriter's model: both write text

_SESSION: contextvars.ContextVar[Callable[[], GeoSession] | None] = contextvars.ContextVar(
    "pytest_geo_session", default=None
)
_TRACE: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("pytest_geo_trace", default=None)
_OVERRIDES: contextvars.ContextVar[Mapping[str, str]] = contextvars.ContextVar(
    "pytest_geo_templates", default=MappingProxyType({})
)


@contextmanager
def running_with(session: Callable[[], GeoSession]) -> Iterator[None]:
    """Prompt procedures called inside use this run's client (built on first call)."""
    token = _SESSION.set(session)
    try:
        yield
    finally:
        _SESSION.reset(token)


@contextmanager
def template_override(name: str, template: str) -> Iterator[None]:
    """Score a candidate template without touching the procedure (the optimizer's way)."""
    token = _OVERRIDES.set({**_OVERRIDES.get(), name: template})
    try:
        yield
    finally:
        _OVERRIDES.reset(token)


@contextmanager
def tracing() -> Iterator[list[str]]:
    """Collect what prompt procedures answer inside (evidence for the optimizer)."""
    outputs: list[str] = []
    token = _TRACE.set(outputs)
    try:
        yield outputs
    finally:
        _TRACE.reset(token)


@dataclass(frozen=True)
class PromptProcedure:
    name: str
    template: str
    system: str = ""
    optimize: bool = False
    source: Path | None = None

    @property
    def current_template(self) -> str:
        return _OVERRIDES.get().get(self.name, self.template)

    def values(self, value: Any) -> dict[str, Any]:
        """A mapping input fills placeholders by key; anything else fills `{{input}}`."""
        return dict(value) if isinstance(value, Mapping) else {"input": value}

    def check(self, template: str) -> None:
        """A candidate template must keep every placeholder the current one uses."""
        missing = sorted(placeholders(self.template) - placeholders(template))
        if missing:
            raise PromptError(f"{self.name}: missing placeholder {{{{{missing[0]}}}}} that this procedure needs")
        unknown = sorted(placeholders(template) - placeholders(self.template))
        if unknown:
            raise PromptError(f"{self.name}: unknown placeholder {{{{{unknown[0]}}}}}")

    async def acall(self, session: GeoSession, value: Any) -> str:
        from pytest_geo.engine.answers import check_answer  # the engine loads once a procedure runs

        values = self.values(value)
        try:
            user = render(self.current_template, values)
        except KeyError as exc:
            raise PromptError(f"{self.name}: the input has no value for {{{{{exc.args[0]}}}}}") from None
        messages = ([{"role": "system", "content": self.system}] if self.system else []) + [
            {"role": "user", "content": user}
        ]
        settings = session.settings
        cap = settings.max_output_tokens or DEFAULT_MAX_OUTPUT_TOKENS  # free text: no size to know it by
        request = ChatRequest(
            PROCEDURE_ROLE, settings.models["rewriter"], tuple(messages), settings.temperature,
            {"procedure": self.name, "input": value}, max_output_tokens=cap,
        )
        response = await session.client.complete(request)
        # Its answer is the procedure's output, free text: no schema, and nothing to parse;
        # but a cut or oversized one is no output to score.
        check_answer(self.name, response, cap, OUTPUT_CAP_FLAGS[settings.front_end])
        output = response.text.strip()
        trace = _TRACE.get()
        if trace is not None:
            trace.append(output)
        return output

    def __call__(self, value: Any) -> str:
        make = _SESSION.get()
        if make is None:
            raise RuntimeError(f"prompt procedure {self.name!r} called outside a pytest-geo run")
        session = make()
        return session.runner.run(self.acall(session, value))


def prompt(name: str, template: str | Path, *, system: str = "", optimize: bool = False) -> PromptProcedure:
    """Declare a prompt procedure; `template` is the text, or a Path to a file (relative
    to the declaring file), which `--apply` can then replace."""
    if isinstance(template, Path):
        if not template.is_absolute():
            caller = sys._getframe(1).f_globals.get("__file__")
            template = (Path(caller).parent if caller else Path.cwd()) / template
        try:
            text = template.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise PromptError(f"{template}: cannot read prompt procedure {name!r}: {exc}") from None
        return PromptProcedure(name, text, system, optimize, template.resolve())
    return PromptProcedure(name, template, system, optimize)
