"""optimize-prompts: GEPA searches for a better prompt template.

Nothing is written until the search is over, every write is atomic, and the working
prompt only changes with --apply: an interrupted or failed run leaves it byte-identical.

Two layers. `search()` is generic: a `PromptTask` (one template scored row by row, with
feedback), training rows that drive the proposals and validation rows that choose the
best. `optimize_prompts()` is the GEO command on top of it: the rewriter prompt scored by
the rank experiment. A declared suite whose procedure is a prompt can later be one more
`PromptTask` (its `data` the training rows, its `test_data` the validation rows).
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import json
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Awaitable, Callable, Mapping, Protocol, Sequence, TextIO

from pytest_geo.answers import AnswerError, extract_json_object
from pytest_geo.data import GeoRow, RowProblem, iter_dataset
from pytest_geo.files import write_text_atomic
from pytest_geo.geo import GeoEngine
from pytest_geo.llm.base import ChatClient, ChatRequest, ChatResponse
from pytest_geo.llm.factory import build_client
from pytest_geo.procedures import PromptProcedure, running_with, template_override, tracing
from pytest_geo.prompts import REWRITER_VARS, TEMPLATES, PromptError, placeholders, render
from pytest_geo.runner import Runner
from pytest_geo.scoring import Score, summarize
from pytest_geo.session import GeoSession
from pytest_geo.settings import Settings
from pytest_geo.suites import Metric, Suite, SuiteError, load_rows, score_metric, suites_in

REWRITER = "rewriter_user"
MINIBATCH = 3  # training rows per reflection step (GEPA's default)
# Numbers of the summary printed after each validated candidate, in this order.
SHOWN = ("avg_rank_improvement", "score", "win_rate", "stderr_rank_improvement", "stderr", "n")


class OptimizeError(Exception):
    """optimize-prompts cannot start; the message names the file or flag."""


class BudgetReached(Exception):
    """The next evaluation would pass --max-metric-calls; the search ends here."""


# ---------------------------------------------------------------------------
# The generic core: a template scored row by row, searched with GEPA.
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Example:
    """One row as the search sees it. `key` identifies the row's content, so the same
    row in the training and validation files shares prompt-independent work."""

    split: str
    key: str
    label: str
    row: Any


@dataclass(frozen=True)
class Scored:
    """One row scored with one template; also the trace the reflection reads."""

    label: str
    value: float
    feedback: str
    error: bool
    inputs: Mapping[str, Any]
    output: str | None


class PromptTask(Protocol):
    """What the search needs from the thing being optimized.

    Example (a suite whose procedure is a prompt)::

        class SuitePrompt:
            component = "answer"
            def check(self, template): ...          # raise PromptError if unusable
            async def score(self, template, example):  # run the prompt, apply the metric
                ...
                return Scored(example.label, value, feedback, False, inputs, output)
            def summary(self, values): return {"mean": ..., "n": len(values)}
    """

    component: str

    def check(self, template: str) -> None: ...

    async def score(self, template: str, example: Example) -> Scored: ...

    def summary(self, values: Sequence[float]) -> dict[str, float | int]: ...


Ask = Callable[[str, str, Mapping[str, Any], Callable[[str], str]], Awaitable[str]]


@dataclass(frozen=True)
class Reflection:
    """How to ask the optimizer role for a new template: the meta prompts, and `ask`,
    which sends them and re-asks (with the problem stated) when `parse` rejects an answer."""

    system: str
    user: str
    required: tuple[str, ...]
    optional: tuple[str, ...]
    ask: Ask


@dataclass
class Candidate:
    """A template scored on every validation row; index 0 is the current prompt."""

    index: int
    template: str
    values: list[float]
    summary: dict[str, float | int]

    @property
    def mean(self) -> float:
        return sum(self.values) / len(self.values) if self.values else 0.0


@dataclass
class SearchResult:
    candidates: list[Candidate]
    best: Candidate
    metric_calls: int
    templates_tried: int
    proposals: int
    rejected: list[str]
    stopped: str
    rescore: Callable[..., list[Scored]]

    @property
    def baseline(self) -> Candidate:
        return self.candidates[0]


class CallCounter:
    """Counts model requests by role and by phase of the search (for the summary)."""

    def __init__(self, inner: ChatClient) -> None:
        self.inner = inner
        self.phase = "validation"
        self.by_role: Counter[str] = Counter()
        self.by_phase: Counter[str] = Counter()

    @property
    def total(self) -> int:
        return sum(self.by_role.values())

    async def complete(self, request: ChatRequest) -> ChatResponse:
        self.by_role[request.role] += 1
        self.by_phase[self.phase] += 1
        return await self.inner.complete(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


def better(challenger: Candidate, incumbent: Candidate) -> bool:
    """Higher validation mean wins; a tie goes to the later candidate, which passed the
    training check against its parent (so the current prompt stays only if nothing
    proposed scores at least as well)."""
    return challenger.mean >= incumbent.mean


def describe(summary: Mapping[str, float | int]) -> str:
    keys = [k for k in SHOWN if k in summary] + [k for k in summary if k not in SHOWN]
    return " ".join(f"{k}={summary[k]:.4f}" if isinstance(summary[k], float) else f"{k}={summary[k]}" for k in keys)


class _Search:
    """The GEPA adapter (evaluate, make_reflective_dataset, propose_new_texts) and the
    callbacks that keep the progress and the candidates; GEPA owns the loop."""

    def __init__(
        self,
        task: PromptTask,
        reflection: Reflection,
        runner: Runner,
        budget: int | None,
        seed: int,
        counter: CallCounter | None,
        out: TextIO,
    ) -> None:
        self.task = task
        self.reflection = reflection
        self.runner = runner
        self.budget = budget
        self.seed = seed
        self.counter = counter
        self.out = out
        self.metric_calls = 0
        self.proposals = 0
        self.rejected: list[str] = []
        self.templates: set[str] = set()
        self.candidates: list[Candidate] = []
        self.best: Candidate | None = None
        self._memo: dict[tuple[str, str], Scored] = {}

    def say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def _phase(self, name: str) -> None:
        if self.counter is not None:
            self.counter.phase = name

    # --- scoring ---------------------------------------------------------

    async def _score(self, template: str, example: Example) -> Scored:
        """A template's score on a row is kept: the search asks for it again (parent on a
        minibatch, then the same row in validation) and it would cost the same calls."""
        key = (template, example.key)
        found = self._memo.get(key)
        if found is None:
            found = await self.task.score(template, example)
            if not found.error:  # errors may be transient: try again next time
                self._memo[key] = found
        return found

    def score_all(self, template: str, examples: Sequence[Example], phase: str | None = None) -> list[Scored]:
        self.templates.add(template)
        self._phase(phase or (examples[0].split if examples else "validation"))
        futures = [self.runner.submit(lambda ex=ex: self._score(template, ex)) for ex in examples]
        return [future.result() for future in futures]

    # --- GEPAAdapter -----------------------------------------------------

    def evaluate(self, batch: list[Example], candidate: dict[str, str], capture_traces: bool = False) -> Any:
        from gepa import EvaluationBatch

        if self.budget is not None and self.metric_calls + len(batch) > self.budget:
            raise BudgetReached()
        self.metric_calls += len(batch)
        scored = self.score_all(candidate[self.task.component], batch)
        return EvaluationBatch(
            outputs=scored,
            scores=[s.value for s in scored],
            trajectories=scored if capture_traces else None,
        )

    def make_reflective_dataset(
        self, candidate: dict[str, str], eval_batch: Any, components_to_update: list[str]
    ) -> dict[str, list[dict[str, Any]]]:
        records = [
            {
                "Inputs": dict(s.inputs),
                "Generated Outputs": s.output if s.output is not None else "(none)",
                "Feedback": s.feedback,
                "score": s.value,
                "row": s.label,
            }
            for s in eval_batch.trajectories or []
        ]
        return {name: records for name in components_to_update}

    def propose_new_texts(
        self,
        candidate: dict[str, str],
        reflective_dataset: Mapping[str, Sequence[Mapping[str, Any]]],
        components_to_update: list[str],
    ) -> dict[str, str]:
        """GEPA's instruction-proposal hook: our meta prompts and JSON answer instead of
        GEPA's own reflection prompt. A proposal failing the placeholder check is asked
        for again, then dropped (an empty result makes GEPA skip the iteration)."""
        proposed: dict[str, str] = {}
        for name in components_to_update:
            text = self._propose(candidate[name], reflective_dataset.get(name, ()))
            if text is not None:
                proposed[name] = text
        return proposed

    def _propose(self, current: str, records: Sequence[Mapping[str, Any]]) -> str | None:
        self.proposals += 1
        number = self.proposals
        values = [float(r.get("score", 0.0)) for r in records]
        score = f"{describe(self.task.summary(values))} over {len(values)} training rows"
        feedback = "\n".join(f"- {r.get('row')}: {r.get('Feedback')} (score {r.get('score')})" for r in records)
        fields = {
            "current_prompt": current,
            "feedback": feedback or "(no rows)",
            "examples": json.dumps(list(records), ensure_ascii=False, indent=2, default=str),
            "score": score,
            "required_placeholders": ", ".join("{{%s}}" % p for p in self.reflection.required),
            "optional_placeholders": ", ".join("{{%s}}" % p for p in self.reflection.optional),
        }
        def parse(text: str) -> str:
            answer = extract_json_object(text)
            new = answer.get("new_prompt")
            if not isinstance(new, str) or not new.strip():
                raise AnswerError("answer has no non-empty 'new_prompt' text")
            try:
                self.task.check(new)
            except PromptError as exc:
                self.rejected.append(str(exc))
                self.say(f"proposal {number}: rejected: {exc}")
                raise AnswerError(str(exc)) from None
            return new

        context = {"current_prompt": current, "seed": self.seed, "proposal": number, "feedback": feedback}
        self._phase("reflection")
        try:
            system, user = render(self.reflection.system, fields), render(self.reflection.user, fields)
            # submit, not run: a pending submission is cancelled when the session closes
            new = self.runner.submit(lambda: self.reflection.ask(system, user, context, parse)).result()
        except Exception as exc:  # noqa: BLE001 - an unusable proposal ends this step only
            self.say(f"proposal {number}: no usable template: {' '.join(str(exc).split())}")
            return None
        if new == current:
            self.say(f"proposal {number}: unchanged template, skipped")
            return None
        return new

    # --- GEPA callbacks --------------------------------------------------

    def on_valset_evaluated(self, event: Mapping[str, Any]) -> None:
        scores = event["scores_by_val_id"]
        values = [float(scores[k]) for k in sorted(scores)]
        candidate = Candidate(
            int(event["candidate_idx"]), event["candidate"][self.task.component], values, self.task.summary(values)
        )
        self.candidates.append(candidate)
        if self.best is None or better(candidate, self.best):
            self.best = candidate
        name = "current prompt" if candidate.index == 0 else f"proposal {self.proposals}"
        self.say(
            f"candidate {candidate.index} ({name}): validation {describe(candidate.summary)}"
            f" | best so far: candidate {self.best.index} ({self.best.mean:.4f})"
        )

    def on_candidate_rejected(self, event: Mapping[str, Any]) -> None:
        self.say(f"proposal {self.proposals}: not validated: {event['reason']}")


def search(
    task: PromptTask,
    seed_template: str,
    train: Sequence[Example],
    val: Sequence[Example],
    reflection: Reflection,
    runner: Runner,
    *,
    iters: int,
    max_metric_calls: int | None = None,
    seed: int = 0,
    counter: CallCounter | None = None,
    out: TextIO | None = None,
) -> SearchResult:
    """Search with GEPA; the seed template is candidate 0, so the best is never worse
    than it on validation. Stops after `iters` proposals or before an evaluation that
    would pass `max_metric_calls` (row evaluations), keeping the best found so far."""
    try:
        import gepa
        from gepa.utils import MaxCandidateProposalsStopper
    except ImportError:
        raise OptimizeError("optimize-prompts needs the gepa package: pip install 'pytest-geo[optimize]'") from None
    if not train or not val:
        raise OptimizeError("optimize-prompts needs at least one training and one validation row")
    check_budget(max_metric_calls, len(val))
    task.check(seed_template)
    state = _Search(task, reflection, runner, max_metric_calls, seed, counter, out or sys.stdout)
    stopped = "iterations"
    try:
        gepa.optimize(
            seed_candidate={task.component: seed_template},
            trainset=list(train),
            valset=list(val),
            adapter=state,
            candidate_selection_strategy="pareto",
            skip_perfect_score=False,  # rank improvements have no fixed perfect score
            reflection_minibatch_size=min(MINIBATCH, len(train)),
            # Integer rank changes on a few rows tie often: a tie goes on to validation.
            acceptance_criterion="improvement_or_equal",
            max_metric_calls=max_metric_calls,
            stop_callbacks=MaxCandidateProposalsStopper(iters),
            logger=_Quiet(),
            callbacks=[state],
            seed=seed,
            raise_on_exception=True,
        )
    except BudgetReached:
        stopped = "max_metric_calls"
    if max_metric_calls is not None and state.metric_calls >= max_metric_calls:
        stopped = "max_metric_calls"
    if state.best is None:  # gepa scores the seed first; only a bug gets here
        raise OptimizeError("the search ended before the current prompt was scored")
    return SearchResult(
        candidates=state.candidates,
        best=state.best,
        metric_calls=state.metric_calls,
        templates_tried=len(state.templates),
        proposals=state.proposals,
        rejected=state.rejected,
        stopped=stopped,
        rescore=state.score_all,
    )


def check_budget(max_metric_calls: int | None, n_val: int) -> None:
    if max_metric_calls is not None and max_metric_calls < n_val:
        raise OptimizeError(
            f"--max-metric-calls {max_metric_calls} is below the {n_val} validation rows "
            "that scoring the current prompt needs"
        )


class _Quiet:
    """GEPA's log lines repeat what our progress lines say."""

    def log(self, message: str) -> None:
        return None


# ---------------------------------------------------------------------------
# The GEO rewriter prompt as a PromptTask.
# ---------------------------------------------------------------------------


class GeoRewriterTask:
    """The rewriter prompt scored by the rank experiment. `rank_before` does not depend
    on the prompt, so it is computed once per row and shared by every candidate."""

    component = REWRITER

    def __init__(self, engine: GeoEngine) -> None:
        self.engine = engine
        self._before: dict[str, asyncio.Task[int]] = {}

    def check(self, template: str) -> None:
        self.engine.prompts.with_rewriter_user(template)

    def _rank_before(self, example: Example) -> asyncio.Task[int]:
        task = self._before.get(example.key)
        if task is None or (task.done() and (task.cancelled() or task.exception() is not None)):
            row: GeoRow = example.row
            task = self._before[example.key] = asyncio.ensure_future(self.engine.rank(row, row.candidates))
        return task

    async def score(self, template: str, example: Example) -> Scored:
        row: GeoRow = example.row
        prompts = self.engine.prompts.with_rewriter_user(template)
        # shield: one candidate's cancelled row must not cancel the shared ranking
        outcome = await self.engine.run(row, prompts, asyncio.shield(self._rank_before(example)))
        score = outcome.score()
        target = row.target
        return Scored(
            label=f"{row.label} (target {row.target_id})",
            value=score.value,
            feedback=score.feedback,
            error=score.error,
            inputs={"query": row.query, "title": target.title, "description": target.description},
            output=outcome.rewritten_description,
        )

    def summary(self, values: Sequence[float]) -> dict[str, float | int]:
        return summarize(values).as_geo()


def row_key(row: GeoRow) -> str:
    content = [row.query, row.target_id, [c.as_dict() for c in row.candidates]]
    return hashlib.sha256(json.dumps(content, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def load_examples(path: Path, split: str, seed: int) -> list[Example]:
    """All rows of a dataset; a malformed line stops the command (optimizing on a silently
    shortened dataset would mislead)."""
    rows: list[GeoRow] = []
    problems: list[RowProblem] = []
    for line in iter_dataset(path, seed):
        (problems if isinstance(line, RowProblem) else rows).append(line)
    if problems:
        more = f" (and {len(problems) - 1} more malformed lines)" if len(problems) > 1 else ""
        raise OptimizeError(f"{problems[0]}{more}")
    if not rows:
        raise OptimizeError(f"{path}: no rows")
    return [Example(split, row_key(row), row.label, row) for row in rows]


@dataclass
class OptimizeOptions:
    train: Path | None = None
    val: Path | None = None
    iters: int = 3
    max_metric_calls: int | None = None
    apply: bool = False
    out: TextIO | None = None  # default: sys.stdout at call time
    suites: Path | None = None  # optimize the prompt procedures of a suites file instead


@dataclass(frozen=True)
class Outputs:
    """Where one search writes: the candidate, its scores, and (with --apply) the
    working template; `working` is None for a template written inline in code."""

    working: Path | None
    candidate: Path
    scores: Path


def _reflection(engine: GeoEngine, prompts_dir: Path, required: Sequence[str], optional: Sequence[str]) -> Reflection:
    prompts = engine.prompts
    for name in ("meta_optimizer_system", "meta_optimizer_user"):
        if getattr(prompts, name) is None:
            raise OptimizeError(f"{prompts_dir / (name + '.txt')}: prompt file not found (optimize-prompts needs it)")

    def ask(system: str, user: str, context: Mapping[str, Any], parse: Callable[[str], str]) -> Awaitable[str]:
        return engine.ask("optimizer", system, user, context, parse)

    return Reflection(
        system=prompts.meta_optimizer_system or "",
        user=prompts.meta_optimizer_user or "",
        required=tuple(required),
        optional=tuple(optional),
        ask=ask,
    )


def optimize_prompts(settings: Settings, options: OptimizeOptions, client: ChatClient | None = None) -> int:
    """The `egeo optimize-prompts` command; returns the exit status."""
    if options.suites is not None:
        return optimize_suite_prompts(settings, options, client)
    assert options.train is not None and options.val is not None
    prompts_dir = Path(settings.prompts_dir)
    outputs = Outputs(
        prompts_dir / "rewriter_user.txt",
        prompts_dir / "rewriter_user.candidate.txt",
        prompts_dir / "rewriter_user.optimized_scores.json",
    )
    train = load_examples(options.train, "train", settings.seed)
    val = load_examples(options.val, "validation", settings.seed)
    check_budget(options.max_metric_calls, len(val))
    counter = CallCounter(client or build_client(settings))
    geo = GeoSession(settings, client=counter)
    try:
        required = tuple(sorted(TEMPLATES["rewriter_user.txt"][1]))
        reflection = _reflection(geo.engine, prompts_dir, required, sorted(REWRITER_VARS - set(required)))
        return search_and_write(
            GeoRewriterTask(geo.engine), geo.prompts.rewriter_user, train, val, reflection, geo, counter,
            options, outputs, {"train": str(options.train), "val": str(options.val)},
        )
    finally:
        geo.close()


def search_and_write(
    task: PromptTask,
    current: str,
    train: Sequence[Example],
    val: Sequence[Example],
    reflection: Reflection,
    geo: GeoSession,
    counter: CallCounter,
    options: OptimizeOptions,
    outputs: Outputs,
    sources: Mapping[str, str],
) -> int:
    """Search, then write the candidate and its scores (and with --apply the working
    template): nothing is written before the search is over."""
    out = options.out or sys.stdout
    settings = geo.settings
    original = outputs.working.read_bytes() if outputs.working is not None else None
    budget = "none" if options.max_metric_calls is None else str(options.max_metric_calls)
    print(
        f"optimize-prompts: {task.component}: {len(train)} training rows ({sources['train']}), {len(val)} "
        f"validation rows ({sources['val']}), seed {settings.seed}, iters {options.iters}, max metric calls {budget}",
        file=out,
        flush=True,
    )
    result = search(
        task,
        current,
        train,
        val,
        reflection,
        geo.runner,
        iters=options.iters,
        max_metric_calls=options.max_metric_calls,
        seed=settings.seed,
        counter=counter,
        out=out,
    )
    search_calls = counter.total
    final = result.rescore(result.best.template, train, phase="final training score")
    train_summary = task.summary([s.value for s in final])

    best, baseline = result.best, result.baseline
    task.check(best.template)  # the guard once more, right before anything is written
    k, m = len(result.candidates), len(val)
    scores = {
        "component": task.component,
        "seed": settings.seed,
        **sources,
        "baseline_validation": baseline.summary,
        "best_validation": best.summary,
        "best_candidate": best.index,
        "best_is_current_prompt": best.template == current,
        "post_optimization_train": train_summary,
        "candidates_tried": result.templates_tried,
        "candidates_validated": k,
        "proposals": result.proposals,
        "proposals_rejected": len(result.rejected),
        "rejections": result.rejected,
        "metric_calls": result.metric_calls,
        "max_metric_calls": options.max_metric_calls,
        "stopped": result.stopped,
        "model_calls": counter.total,
        "model_calls_search": search_calls,
        "model_calls_by_role": dict(sorted(counter.by_role.items())),
        "model_calls_by_phase": dict(sorted(counter.by_phase.items())),
        "validation_call_bound": m + 2 * k * m if task.component == REWRITER else None,
        "applied": False,
    }
    write_text_atomic(outputs.candidate, best.template)
    working = outputs.working
    applied = False
    if options.apply and best.template != current:
        if working is None:
            print(f"egeo: warning: {task.component}: the template is written inline; copy the candidate by hand",
                  file=sys.stderr)
        elif working.read_bytes() != original:
            print(f"egeo: warning: {working} changed during the run; not applied", file=sys.stderr)
        else:
            write_text_atomic(working, best.template)
            applied = True
    scores["applied"] = applied
    write_text_atomic(outputs.scores, json.dumps(scores, indent=2, sort_keys=False) + "\n")

    stop_text = {
        "iterations": f"{options.iters} iterations done",
        "max_metric_calls": f"at the metric-call budget of {options.max_metric_calls}",
    }[result.stopped]
    print(f"stopped: {stop_text} ({result.metric_calls} metric calls used)", file=out)
    print(
        f"best: candidate {best.index}; validation {describe(best.summary)} "
        f"(current prompt: {describe(baseline.summary)})",
        file=out,
    )
    print(f"post-optimization training score: {describe(train_summary)}", file=out)
    roles = ", ".join(f"{role} {n}" for role, n in sorted(counter.by_role.items()))
    bound = f" (at most M + 2*K*M = {m + 2 * k * m}, plus re-asks)" if task.component == REWRITER else ""
    print(
        f"model calls: {counter.total} ({roles}); validation: {counter.by_phase.get('validation', 0)} "
        f"for K={k} candidates over M={m} rows{bound}",
        file=out,
    )
    print(
        f"candidates tried: {result.templates_tried}, validated: {k}, proposals rejected: {len(result.rejected)}",
        file=out,
    )
    if applied:
        print(f"applied: {working} replaced (candidate in {outputs.candidate}, scores in {outputs.scores})", file=out)
    else:
        unchanged = f"; {working} unchanged" if working is not None else ""
        print(f"wrote {outputs.candidate} and {outputs.scores}{unchanged}", file=out)
    out.flush()
    return 0


# ---------------------------------------------------------------------------
# A prompt procedure scored by its same-named suite, as a PromptTask.
# ---------------------------------------------------------------------------


class SuitePromptTask:
    """A prompt procedure's template, scored by the suite named after it: the metric
    runs in a worker thread (it calls the procedure synchronously), with the candidate
    template swapped in for that call only."""

    def __init__(self, procedure: PromptProcedure, suite: Suite, metric: Metric, session: GeoSession) -> None:
        self.procedure = procedure
        self.suite = suite
        self.metric = metric
        self.session = session
        self.component = procedure.name

    def check(self, template: str) -> None:
        self.procedure.check(template)

    async def score(self, template: str, example: Example) -> Scored:
        value, expected = example.row

        def run_metric() -> tuple[Score, list[str]]:
            with running_with(lambda: self.session), template_override(self.procedure.name, template), tracing() as out:
                return score_metric(self.metric, value, expected), out

        score, outputs = await asyncio.to_thread(run_metric)
        return Scored(
            label=example.label,
            value=score.value,
            feedback=score.feedback,
            error=score.error,
            inputs={"input": value, "expected": expected},
            output="\n".join(outputs) if outputs else None,
        )

    def summary(self, values: Sequence[float]) -> dict[str, float | int]:
        result = summarize(values)
        return {"score": result.mean, "win_rate": result.win_rate, "stderr": result.stderr, "n": result.n}


def load_suites_file(path: Path) -> ModuleType:
    """Import a Python file that declares prompt procedures and their suites."""
    if not path.is_file():
        raise OptimizeError(f"{path}: suites file not found")
    spec = importlib.util.spec_from_file_location(f"_pytest_geo_suites_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise OptimizeError(f"{path}: not an importable Python file")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent.resolve()))
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise OptimizeError(f"{path}: cannot import: {type(exc).__name__}: {exc}") from None
    finally:
        sys.path.pop(0)
    return module


def _suite_examples(suite: Suite, metric: Metric, spec: Any, split: str, seed: int) -> list[Example]:
    try:
        rows = load_rows(suite.name, metric.dataset, spec, suite.base_dir, seed)
    except SuiteError as exc:
        raise OptimizeError(str(exc)) from None
    return [
        Example(split, hashlib.sha256(repr(row).encode()).hexdigest(), f"{suite.name} {split}[{i}]", row)
        for i, row in enumerate(rows)
    ]


def optimize_suite_prompts(settings: Settings, options: OptimizeOptions, client: ChatClient | None = None) -> int:
    """Kedi's rule: every prompt procedure marked `optimize=True` needs a same-named eval
    suite; its `data` drives the proposals and its `test_data` chooses the best (its
    `data` again when it has none)."""
    assert options.suites is not None
    module = load_suites_file(options.suites)
    procedures = [p for p in vars(module).values() if isinstance(p, PromptProcedure) and p.optimize]
    if not procedures:
        raise OptimizeError(f"{options.suites}: no prompt procedure is marked optimize=True")
    suites = {s.name: s for s in suites_in(module)}
    for procedure in procedures:
        if procedure.name not in suites:
            raise OptimizeError(
                f"{options.suites}: prompt procedure {procedure.name!r} is marked optimize=True "
                f"but no eval suite is named {procedure.name!r}"
            )
    counter = CallCounter(client or build_client(settings))
    geo = GeoSession(settings, client=counter)
    try:
        for procedure in procedures:
            suite = suites[procedure.name]
            try:
                metric = suite.check()
            except SuiteError as exc:
                raise OptimizeError(str(exc)) from None
            if metric.is_geo:
                raise OptimizeError(f"suite {suite.name!r}: optimize the GEO rewriter with --train/--val instead")
            train = _suite_examples(suite, metric, suite.data[metric.dataset], "train", settings.seed)
            val_spec = suite.test_data.get(metric.dataset, suite.data[metric.dataset])
            val = _suite_examples(suite, metric, val_spec, "validation", settings.seed)
            if not train or not val:
                raise OptimizeError(f"suite {suite.name!r}: dataset {metric.dataset!r} has no rows")
            check_budget(options.max_metric_calls, len(val))
            if procedure.source is not None:
                stem = procedure.source.with_suffix("")
                outputs = Outputs(procedure.source, Path(f"{stem}.candidate.txt"), Path(f"{stem}.optimized_scores.json"))
            else:
                base = options.suites.parent / procedure.name
                outputs = Outputs(None, Path(f"{base}.candidate.txt"), Path(f"{base}.optimized_scores.json"))
            reflection = _reflection(geo.engine, Path(settings.prompts_dir), sorted(placeholders(procedure.template)), ())
            which = "test_data" if metric.dataset in suite.test_data else "data (no test_data)"
            search_and_write(
                SuitePromptTask(procedure, suite, metric, geo), procedure.template, train, val, reflection, geo,
                counter, options, outputs,
                {"train": f"{options.suites}::{suite.name} data", "val": f"{options.suites}::{suite.name} {which}"},
            )
    finally:
        geo.close()
    return 0
