"""The E-GEO rank experiment for one row: rank, rewrite, rank again."""

from __future__ import annotations

import asyncio
import functools
import inspect
import random
import time
from collections.abc import Awaitable, Callable, Collection, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field, replace
from json.encoder import encode_basestring
from typing import TYPE_CHECKING, Any, TypeVar

from pytest_geo.data.dataset import Candidate, GeoRow
from pytest_geo.data.record import ModelCall, OutcomeFields
from pytest_geo.data.rewrites_file import GivenRewrite
from pytest_geo.engine.answer_schemas import egeo_ranking_schema, ranking_schema, rewrite_schema
from pytest_geo.engine.answers import (
    Judgement,
    UnusableAnswer,
    check_answer,
    kept_answer,
    parse_egeo_ranking,
    parse_ranking,
    parse_rewrite,
)
from pytest_geo.engine.facts import new_facts
from pytest_geo.engine.judges import Judge
from pytest_geo.engine.prompts import CANDIDATE_VARS, PromptSet
from pytest_geo.engine.shared_rank import Place, Ranked, SharedRanks
from pytest_geo.llm.answer_json import AnswerError
from pytest_geo.llm.base import ChatClient, ChatRequest, ServerUnusable
from pytest_geo.llm.profiles import ranking_bytes, rewrite_bytes, sized_cap
from pytest_geo.scoring import Score
from pytest_geo.settings import DEFAULT_MAX_OUTPUT_TOKENS
from pytest_geo.templates import placeholders, render

if TYPE_CHECKING:
    from pytest_geo.engine.panel import JudgeOutcome

T = TypeVar("T")
A = TypeVar("A")
B = TypeVar("B")
DEFAULT_REASKS = 2


@dataclass(frozen=True)
class GeoOutcome:
    """What one row's experiment produced; `error` is set when it did not finish."""

    query_id: str | None
    target_id: str
    rank_before: float | None = None  # with judges, the means over those that scored the row
    rank_after: float | None = None
    rewritten_description: str | None = None
    error: str | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)
    fact_violations: tuple[str, ...] = ()
    # Every model call of the row in experiment order (rank_before, rewrite, rank_after),
    # for the HTML report's transcripts; plain dicts, since records cross processes.
    calls: tuple[ModelCall, ...] = field(default=(), repr=False, compare=False)
    not_run: bool = False  # the model server was found unusable: no result, not an error
    # With --geo-judge: each judge's cell (engine/panel.py), in the judges' order.
    judges: tuple[JudgeOutcome, ...] = ()
    seconds: float = field(default=0.0, compare=False)  # the experiment's wall time
    # With E-GEO's answers (prompts naming `questionable_products`): whether the ranker
    # listed the target as questionable before and after the rewrite; None: not asked.
    flagged_before: bool | None = None
    flagged_after: bool | None = None

    @property
    def rank_improvement(self) -> float | None:
        if self.error is not None or self.rank_before is None or self.rank_after is None:
            return None
        return self.rank_before - self.rank_after

    @property
    def feedback(self) -> str:
        if self.error is not None:
            return f"error: {self.error}"
        text = f"rank {self.rank_before} -> {self.rank_after}"
        if self.flagged_after:
            text += " (flagged as questionable)"
        if self.judges:
            text = "; ".join(f"{j.name}: rank {j.rank_before} -> {j.rank_after}"
                             + (" (flagged as questionable)" if j.flagged_after else "") for j in self.judges)
        facts = [f"new facts: {', '.join(self.fact_violations)}"] if self.fact_violations else []
        return "; ".join([text, *self.notes, *facts])

    def score(self) -> Score:
        if self.error is not None:
            return Score.from_error(self.error)
        return Score(float(self.rank_improvement or 0), self.feedback)

    def record(self) -> OutcomeFields:
        """This outcome's part of the row's record (plain types only: it crosses processes)."""
        score = self.score()  # its feedback is `feedback`, made once
        fields = OutcomeFields(
            query_id=self.query_id,
            target_id=self.target_id,
            rank_before=self.rank_before,
            rank_after=self.rank_after,
            rank_improvement=self.rank_improvement,
            rewritten_description=self.rewritten_description,
            score=score.value,
            feedback=score.feedback,
            error=self.error,
            fact_violations=list(self.fact_violations),
            calls=list(self.calls),
            seconds=round(self.seconds, 3),
        )
        if self.judges:
            fields["judges"] = {j.name: j.record() for j in self.judges}
        if self.flagged_before is not None:
            fields["flagged_before"] = self.flagged_before
        if self.flagged_after is not None:
            fields["flagged_after"] = self.flagged_after
        return fields


def candidate_values(
    query: str, query_id: str | None, candidates: tuple[Candidate, ...], used: Collection[str] | None = None
) -> dict[str, Any]:
    """The ranker's placeholder values; with `used`, the renderings of the candidates
    are built only if the templates use them."""
    return Shown.of(candidates, CANDIDATE_VARS if used is None else used).values(query, query_id)


def candidate_dicts(candidates: tuple[Candidate, ...]) -> list[dict[str, str]]:
    """`[c.as_dict() for c in candidates]`, the ranker's context, without a call a candidate."""
    return [{"id": id_, "title": title, "description": description} for id_, title, description in candidates]


def _block(c: Candidate) -> str:
    """A candidate in the E-GEO harness's `{{candidates}}`: `- id:`, `  title:`,
    `  description:` and the description's lines indented by two spaces (a blank line
    between candidates)."""
    lines = [f"- id: {c.id}", f"  title: {c.title}", "  description:"]
    lines += [f"  {line}" for line in c.description.splitlines()]
    return "\n".join(lines)


@functools.lru_cache(maxsize=64)
def _used_placeholders(*templates: str) -> frozenset[str]:
    return frozenset().union(*(placeholders(t) for t in templates))


# Kept (issue 36): with `indent`, json.dumps runs its pure-Python encoder on every ranker prompt.
def _json_line(c: Candidate) -> str:
    return (f'{{"id": {encode_basestring(c.id)}, "title": {encode_basestring(c.title)}, '
            f'"description": {encode_basestring(c.description)}}}')


def _json_item(c: Candidate) -> str:
    return (f'  {{\n    "id": {encode_basestring(c.id)},\n    "title": {encode_basestring(c.title)},\n'
            f'    "description": {encode_basestring(c.description)}\n  }}')


def _json_array(items: list[str]) -> str:
    """`{{candidates_json}}`: `json.dumps([c.as_dict() for c in candidates],
    ensure_ascii=False, indent=2)` of the `_json_item`s, byte for byte, written directly:
    `indent` forces json's pure-Python encoder, the hot spot of rendering a ranker prompt.
    (`{{candidates_jsonl}}` is `json.dumps` of each, likewise.)"""
    return "[\n" + ",\n".join(items) + "\n]" if items else "[]"


def _product(c: Candidate) -> str:
    """A candidate in `{{products}}`, as the E-GEO benchmark shows a product: its number
    (the id) and title, then its description's lines (a blank line between products)."""
    return f"[{c.id}] {c.title}\n{c.description}".rstrip()


# Each way a ranker template can show the candidates: how one candidate is written, and
# how the written candidates are joined.
CANDIDATE_FORMS: dict[str, tuple[Callable[[Candidate], str], Callable[[list[str]], str]]] = {
    "candidates": (_block, "\n\n".join),
    "candidates_jsonl": (_json_line, "\n".join),
    "candidates_json": (_json_item, _json_array),
    "products": (_product, "\n\n".join),
}


@dataclass(frozen=True)
class GivenRewrites:
    """Rewrites made elsewhere (data/rewrites_file.py), by query id, and their file."""

    path: str
    rewrites: Mapping[str, GivenRewrite]

    def text_of(self, row: GeoRow) -> str:
        given = self.rewrites.get(row.query_id or "")
        if given is None:  # the front ends check every row first; a row's error if one slips by
            raise ValueError(f"no rewrite of query {row.query_id} in {self.path}")
        return given.text


@dataclass(frozen=True)
class Shown:
    """A row's candidates as the ranker is shown them: their ids, the answer's schema
    (made from the ids) and each candidate written as the templates show it (`written`:
    placeholder -> one text a candidate). Made once a row: rank_after shows rank_before's
    candidates with the target's description rewritten (`rewritten`), so only the target
    is written again."""

    candidates: tuple[Candidate, ...]
    ids: list[str]
    schema: dict[str, Any]
    written: dict[str, list[str]]

    @classmethod
    def of(cls, candidates: tuple[Candidate, ...], used: Collection[str], egeo: bool = False) -> Shown:
        """`egeo`: the answer asked for is E-GEO's (its schema then)."""
        ids = [c.id for c in candidates]
        written = {name: list(map(write, candidates)) for name, (write, _) in CANDIDATE_FORMS.items() if name in used}
        return cls(candidates, ids, egeo_ranking_schema(ids) if egeo else ranking_schema(ids), written)

    def values(self, query: str, query_id: str | None) -> dict[str, Any]:
        """The ranker's placeholder values."""
        values: dict[str, Any] = {"query": query, "query_id": query_id or "", "n_candidates": len(self.candidates)}
        for name, texts in self.written.items():
            values[name] = CANDIDATE_FORMS[name][1](texts)
        return values

    def rewritten(self, target_id: str, description: str) -> Shown:
        """The same candidates, the target's description replaced (ids and order kept)."""
        candidates = tuple(Candidate(c.id, c.title, description) if c.id == target_id else c for c in self.candidates)
        written = {name: [CANDIDATE_FORMS[name][0](c) if c.id == target_id else text
                          for c, text in zip(candidates, texts, strict=True)]
                   for name, texts in self.written.items()}
        return Shown(candidates, self.ids, self.schema, written)


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


class GeoEngine:
    """Runs the experiment with one prompt set and one client; shared by plugin and CLI."""

    def __init__(
        self,
        prompts: PromptSet,
        client: ChatClient,
        models: Mapping[str, str],
        temperature: float | None = None,
        reasks: int = DEFAULT_REASKS,
        strict_facts: bool = False,
        max_output_tokens: int | None = None,
        cap_flag: str = "--geo-max-output-tokens",
        judges: Sequence[Judge] = (),
        reasoning_effort: str | None = None,
        given: GivenRewrites | None = None,
    ) -> None:
        self.prompts = prompts
        self.client = client
        self.models = dict(models)
        self.temperature = temperature
        self.reasks = reasks
        self.strict_facts = strict_facts  # a rewrite with new facts is the row's error
        self.max_output_tokens = max_output_tokens  # sent on every call; None: sized to each answer
        self.reasoning_effort = reasoning_effort  # which models reason (they keep the default cap)
        self.cap_flag = cap_flag  # the flag that sets it, named when an answer is cut at it
        self.judges = tuple(judges)  # a panel (engine/panel.py); empty: the ranker alone
        self.given = given  # --geo-rewrites: the rewrites to score; the rewriter is never called

    async def ask(
        self,
        role: str,
        system: str,
        user: str,
        context: Mapping[str, Any],
        parse: Callable[[str], T],
        calls: list[ModelCall] | None = None,
        step: str = "",
        schema: Mapping[str, Any] | None = None,
        judge: Judge | None = None,
        model: str | None = None,
        answer_bytes: int | None = None,
    ) -> T:
        """Ask (for an answer in `schema`'s shape, when given), parse, and on an answer
        that does not parse ask again with the problem stated. An answer cut at the
        output-token cap, or over the answer size cap, fails at once (UnusableAnswer).

        Every call goes through here, so this is where a row's transcript is kept: each
        attempt's messages and raw answer are appended to `calls` when it is given.
        A `judge` asks with its own model, temperature and output cap; `model` names
        another model for the role (a variant's rewriter)."""
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        model = model or self.models[role]
        temperature, cap = self.temperature, self.output_cap(model, answer_bytes)
        if judge is not None:
            model = judge.model
            temperature = judge.temperature if judge.temperature is not None else temperature
            cap = judge.max_output_tokens or self.output_cap(model, answer_bytes)
        for attempt in range(self.reasks + 1):
            request = ChatRequest(role, model, tuple(messages), temperature, context, cap, schema)
            call: ModelCall = {"step": step or role, "role": role, "model": request.model, "attempt": attempt,
                               "messages": [dict(m) for m in messages], "answer": None, "cached": False}
            if judge is not None:
                call["judge"] = judge.name
            if calls is not None:
                calls.append(call)
            sent = time.perf_counter()
            try:
                response = await self.client.complete(request)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                call["error"] = one_line(exc)
                call["seconds"] = round(time.perf_counter() - sent, 3)
                raise
            call["answer"], call["cached"] = kept_answer(response.text), response.cached
            call["seconds"] = round(time.perf_counter() - sent, 3)
            call["prompt_tokens"], call["completion_tokens"] = response.prompt_tokens, response.completion_tokens
            try:
                check_answer(role, response, cap, self.cap_flag)
            except UnusableAnswer as exc:
                call["error"] = str(exc)
                raise
            try:
                return parse(response.text)
            except AnswerError as exc:
                if attempt == self.reasks:
                    raise AnswerError(f"{role}: {exc} (after {attempt + 1} attempts)") from None
                messages += [
                    {"role": "assistant", "content": response.text},
                    {"role": "user", "content": f"That answer could not be used: {exc}. Answer again, JSON only."},
                ]
        raise AssertionError("unreachable")

    def output_cap(self, model: str, answer_bytes: int | None) -> int:
        """The cap the user set, else one sized to the answer (`answer_bytes` of content;
        None: the default cap), see llm/profiles.py."""
        if self.max_output_tokens is not None:
            return self.max_output_tokens
        if answer_bytes is None:
            return DEFAULT_MAX_OUTPUT_TOKENS
        return sized_cap(model, self.reasoning_effort, answer_bytes, DEFAULT_MAX_OUTPUT_TOKENS)

    def shown(self, candidates: tuple[Candidate, ...]) -> Shown:
        """`candidates` as this engine's ranker templates show them."""
        systems = [j.system_text for j in self.judges if j.system_text is not None]
        return Shown.of(candidates, _used_placeholders(self.prompts.ranker_system, self.prompts.ranker_user,
                                                       *systems), self.prompts.egeo_answers)

    async def rank(self, row: GeoRow, candidates: tuple[Candidate, ...] | Shown,
                   calls: list[ModelCall] | None = None, step: str = "rank") -> Place:
        """The place of the row's target among `candidates` (or as `shown`)."""
        judged = await self.ranking(row, candidates, calls, step)
        return place(judged, row.target_id)

    def ranking(self, row: GeoRow, candidates: tuple[Candidate, ...] | Shown,
                calls: list[ModelCall] | None = None, step: str = "rank",
                judge: Judge | None = None) -> Awaitable[Judgement]:
        """The candidates' ids as the ranker (or `judge`) orders them, best first, and with
        E-GEO's answers those it flagged (the `ask` itself, returned: no coroutine of its
        own on every rank)."""
        shown = candidates if isinstance(candidates, Shown) else self.shown(candidates)
        values = shown.values(row.query, row.query_id)
        ids = shown.ids
        system = judge.system_text if judge is not None and judge.system_text is not None else None
        egeo = self.prompts.egeo_answers
        context: dict[str, Any] = {"query": row.query, "candidates": candidate_dicts(shown.candidates)}
        if egeo:  # the offline mock answers in E-GEO's shape too
            context["answer"] = "egeo"
        if judge is not None:  # the plan counts each judge's calls apart (engine/plan.py)
            context["judge"] = judge.name
        return self.ask(
            "ranker",
            render(system if system is not None else self.prompts.ranker_system, values),
            render(self.prompts.ranker_user, values),
            context,
            functools.partial(parse_egeo_ranking if egeo else _judgement, candidate_ids=ids),
            calls,
            step,
            shown.schema,
            judge,
            answer_bytes=ranking_bytes(ids),
        )

    async def rewrite(self, row: GeoRow, prompts: PromptSet | None = None,
                      calls: list[ModelCall] | None = None, model: str | None = None) -> str:
        if self.given is not None:
            return self.given.text_of(row)
        prompts = prompts or self.prompts
        target = row.target
        values = {
            "query": row.query,
            "query_id": row.query_id or "",
            "id": target.id,
            "target_id": target.id,
            "title": target.title,
            "description": target.description,
        }
        return await self.ask(
            "rewriter",
            render(prompts.rewriter_system, values),
            render(prompts.rewriter_user, values),
            {"query": row.query, **target.as_dict(), "template": prompts.rewriter_user},
            parse_rewrite,
            calls,
            "rewrite",
            rewrite_schema(),
            model=model,
            answer_bytes=rewrite_bytes(target.description),
        )

    async def run(
        self,
        row: GeoRow,
        prompts: PromptSet | None = None,
        rank_before: Awaitable[Place] | None = None,
        rewriter_model: str | None = None,
    ) -> GeoOutcome:
        """The whole experiment; anything that goes wrong becomes the outcome's error.

        `rank_before` may be given (the optimizer computes it once per row and reuses
        it, since it does not depend on the rewriter prompt; its calls are then not part
        of this row's transcript)."""
        started = time.perf_counter()
        before: Place | None = None
        after: Place | None = None
        rewritten: str | None = None
        error: str | None = None
        violations: tuple[str, ...] = ()
        not_run = False
        # One list per step, joined in experiment order: rank_before and the rewrite
        # run concurrently, and their calls would otherwise interleave by timing.
        before_calls: list[ModelCall] = []
        rewrite_calls: list[ModelCall] = []
        after_calls: list[ModelCall] = []
        try:
            shown = self.shown(row.candidates)  # rank_after's too, but the target's description
            before_task = rank_before if rank_before is not None else self.rank(
                row, shown, before_calls, "rank_before")
            before, text = await together(before_task, self.rewrite(row, prompts, rewrite_calls, rewriter_model))
            rewritten, violations = text, fact_violations(row, text)
            after = await self.rank(row, shown.rewritten(row.target_id, text), after_calls, "rank_after")
            if self.strict_facts and violations:
                error = f"new facts not in the original: {', '.join(violations)} (--geo-strict-facts)"
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a row's failure never stops the others
            error, not_run = one_line(exc), isinstance(exc, ServerUnusable)
        calls = (*before_calls, *rewrite_calls, *after_calls)
        if error is not None:  # copies: a call still in flight when its sibling failed must not change the record later
            calls = tuple(ModelCall(**c) for c in calls)
        before_rank, flagged_before = before if before is not None else (None, None)
        after_rank, flagged_after = after if after is not None else (None, None)
        return GeoOutcome(row.query_id, row.target_id, before_rank, after_rank, rewritten, error,
                          fact_violations=violations, calls=calls, not_run=not_run,
                          seconds=time.perf_counter() - started, flagged_before=flagged_before,
                          flagged_after=flagged_after)


def _judgement(text: str, candidate_ids: Sequence[str]) -> Judgement:
    """The ordinary `{"ordered_ids": [...]}` answer, as a judgement without flags."""
    return Judgement(parse_ranking(text, candidate_ids))


def place(judged: Judgement, target_id: str) -> Place:
    """The target's place in a judgement: its rank, and whether it was flagged."""
    flagged = None if judged.flagged is None else target_id in judged.flagged
    return Place(judged.order.index(target_id) + 1, flagged)


async def together(first: Awaitable[A], second: Awaitable[B]) -> tuple[A, B]:
    """Both at once, in a task group, `first` started first (the order requests reach the
    server, a batch or the budget). When one fails the other is cancelled
    (`asyncio.gather` would leave it running, still sending calls and retries for a row
    that has already failed) and its error is raised as itself; `first`'s when both fail."""
    try:
        async with asyncio.TaskGroup() as group:
            one = group.create_task(_coroutine(first))
            two = group.create_task(_coroutine(second))
    except ExceptionGroup as failed:
        errors = [task.exception() for task in (one, two) if task.done() and not task.cancelled()]
        raise next((error for error in errors if error is not None), failed.exceptions[0]) from None
    return one.result(), two.result()


def _coroutine(awaitable: Awaitable[T]) -> Coroutine[Any, Any, T]:
    """A coroutine as it is (one cancelled before it started is then not "never awaited"),
    any other awaitable (a shared future) in one."""
    if inspect.iscoroutine(awaitable):
        return awaitable
    return _awaited(awaitable)


async def _awaited(awaitable: Awaitable[T]) -> T:
    return await awaitable


def fact_violations(row: GeoRow, rewritten: str) -> tuple[str, ...]:
    """What the rewrite states that the target's title and description do not (the
    rewriter sees both). With `strict_facts` the engine then makes that the row's error."""
    target = row.target
    return tuple(new_facts(f"{target.title}\n{target.description}", rewritten))


def repeat_order(seed: int, row: GeoRow, repeat: int) -> tuple[Candidate, ...]:
    """The candidates in a seeded order for one repeat: the same in every run and process
    (a string seed, never `hash()`), different per row and repeat."""
    order = list(row.candidates)
    random.Random(f"{seed}\x1frepeat\x1f{row.path}\x1f{row.label}\x1f{repeat}").shuffle(order)
    return tuple(order)


@dataclass(frozen=True)
class RepeatedOutcome:
    """K runs of one row, each with its own candidate order; the row scores their mean."""

    query_id: str | None
    target_id: str
    runs: tuple[tuple[tuple[str, ...], GeoOutcome], ...]
    seconds: float = 0.0  # the repeats' wall time together (they run at once)

    @property
    def not_run(self) -> bool:
        return any(o.not_run for _, o in self.runs)

    @property
    def error(self) -> str | None:
        return next((f"repeat {i}: {o.error}" for i, (_, o) in enumerate(self.runs) if o.error is not None), None)

    def _mean(self, values: list[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return sum(known) / len(known) if known else None

    @property
    def feedback(self) -> str:
        if self.error is not None:
            return f"error: {self.error}"
        before = self._mean([o.rank_before for _, o in self.runs])
        after = self._mean([o.rank_after for _, o in self.runs])
        text = f"rank {before:.2f} -> {after:.2f} (mean of {len(self.runs)} repeats)"
        facts = list(dict.fromkeys(f for _, o in self.runs for f in o.fact_violations))
        return f"{text}; new facts: {', '.join(facts)}" if facts else text

    def score(self) -> Score:
        value = sum(o.score().value for _, o in self.runs) / len(self.runs)
        return Score(value, self.feedback, self.error is not None)

    def record(self) -> OutcomeFields:
        """Means at the top (errored repeats count 0.0 in `score`), every repeat kept."""
        runs = [o for _, o in self.runs]
        fields = OutcomeFields(
            query_id=self.query_id,
            target_id=self.target_id,
            rank_before=self._mean([o.rank_before for o in runs]),
            rank_after=self._mean([o.rank_after for o in runs]),
            rank_improvement=self._mean([o.rank_improvement for o in runs]),
            rewritten_description=next((o.rewritten_description for o in runs if o.rewritten_description), None),
            score=self.score().value,
            feedback=self.feedback,
            error=self.error,
            # A row adds facts if any repeat's rewrite does: each is a rewrite a user could ship.
            fact_violations=list(dict.fromkeys(f for o in runs for f in o.fact_violations)),
            repeats=[{"repeat": i, "order": list(order), **o.record()} for i, (order, o) in enumerate(self.runs)],
            judge_noise=judge_noise([o.rank_before for o in runs]),
            seconds=round(self.seconds, 3),
        )
        if runs[0].judges:
            fields["judges"] = self._judges()
        if (flagged := any_flagged([o.flagged_before for o in runs])) is not None:
            fields["flagged_before"] = flagged
        if (flagged := any_flagged([o.flagged_after for o in runs])) is not None:
            fields["flagged_after"] = flagged
        return fields

    def _judges(self) -> dict[str, dict[str, Any]]:
        """Each judge's means over the repeats (its first error kept; its ranking of the
        originals from the first repeat that has one)."""
        cells: dict[str, dict[str, Any]] = {}
        for name in [j.name for j in self.runs[0][1].judges]:
            mine = [j for _, o in self.runs for j in o.judges if j.name == name]
            error = next((f"repeat {i}: {j.error}" for i, j in enumerate(mine) if j.error is not None), None)
            cells[name] = {
                "rank_before": self._mean([j.rank_before for j in mine]),
                "rank_after": self._mean([j.rank_after for j in mine]),
                "rank_improvement": None if error else self._mean([j.rank_improvement for j in mine]),
                "error": error,
                "order_before": next((list(j.order_before) for j in mine if j.order_before), []),
            }
            if (flagged := any_flagged([j.flagged_before for j in mine])) is not None:
                cells[name]["flagged_before"] = flagged
            if (flagged := any_flagged([j.flagged_after for j in mine])) is not None:
                cells[name]["flagged_after"] = flagged
        return cells


def any_flagged(flags: list[bool | None]) -> bool | None:
    """A repeated row is flagged when the judge listed the target as questionable in any
    repeat (each repeat's rewrite is one a user could ship, as with new facts); None when
    no repeat's answer had the list."""
    known = [f for f in flags if f is not None]
    return any(known) if known else None


def judge_noise(ranks_before: list[float | None]) -> float | None:
    """How much the judge alone moves the target: the mean absolute deviation of its
    rank_before over the repeats' candidate orders (nothing but the order changed).
    None with fewer than two known ranks."""
    known = [float(r) for r in ranks_before if r is not None]
    if len(known) < 2:
        return None
    mean = sum(known) / len(known)
    return sum(abs(r - mean) for r in known) / len(known)


RunOne = Callable[[GeoRow, int], Awaitable[GeoOutcome]]


async def run_repeats(engine: GeoEngine, row: GeoRow, repeats: int, seed: int,
                      run: RunOne | None = None) -> RepeatedOutcome:
    """`engine.run` (or `run(ordered_row, repeat)`) once per repeat on a shuffled copy of
    the row (the same order before and after within a repeat), to average out the
    ranker's position bias. The order depends on the row and repeat, never the variant:
    every variant of a row sees the same K orders."""
    orders = [repeat_order(seed, row, i) for i in range(repeats)]
    run_one: RunOne = run or (lambda ordered, _: engine.run(ordered))
    started = time.perf_counter()
    outcomes = await asyncio.gather(*(run_one(replace(row, candidates=order), i) for i, order in enumerate(orders)))
    return RepeatedOutcome(row.query_id, row.target_id,
                           tuple((tuple(c.id for c in order), o) for order, o in zip(orders, outcomes, strict=True)),
                           time.perf_counter() - started)


async def _ranked_before(engine: GeoEngine, row: GeoRow) -> Ranked:
    calls: list[ModelCall] = []
    rank = await engine.rank(row, row.candidates, calls, "rank_before")
    return rank, tuple(calls)


async def run_variant(engine: GeoEngine, row: GeoRow, prompts: PromptSet, shared: SharedRanks,
                      repeat: int = 0, rewriter_model: str | None = None) -> GeoOutcome:
    """One variant of a row: its own rewrite and rank_after, with rank_before shared by
    every variant of the row (and repeat). The shared calls head each variant's
    transcript, so every variant's row reads as a whole experiment."""
    before_calls: list[ModelCall] = []

    async def before() -> Place:
        rank, calls = await shared.rank(row, repeat, lambda: _ranked_before(engine, row))
        before_calls.extend(ModelCall(**c) for c in calls)
        return rank

    outcome = await engine.run(row, prompts, before(), rewriter_model)
    return replace(outcome, calls=(*before_calls, *outcome.calls))
