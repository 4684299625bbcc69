"""The generic search: a `PromptTask` (one template scored row by row, with feedback),
training rows that drive GEPA's proposals and validation rows that choose the best.

The seed template is candidate 0, so the best is never worse than the current prompt on
validation; a challenger replaces the incumbent only when strictly better."""

from __future__ import annotations

import functools
import json
import sys
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TextIO

from pytest_geo.engine.answers import AnswerError, extract_json_object
from pytest_geo.engine.runner import Runner
from pytest_geo.llm.base import ChatClient, ChatRequest, ChatResponse
from pytest_geo.templates import PromptError, render

REWRITER = "rewriter_user"
MINIBATCH = 3  # training rows per reflection step (GEPA's default)
HISTORY = 6  # steps shown in {{history}}, as in the E-GEO harness
# Numbers of the summary printed after each validated candidate, in this order.
SHOWN = ("avg_rank_improvement", "score", "win_rate", "stderr_rank_improvement", "stderr", "n")


class OptimizeError(Exception):
    """optimize-prompts cannot start; the message names the file or flag."""


class BudgetReached(Exception):
    """The next evaluation would pass --max-metric-calls; the search ends here."""


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
    """A template scored on every validation row; index 0 is the current prompt.
    `values` are in the validation rows' order; `errored` holds the positions of the
    rows whose score is an error's 0.0, not a measure of the template."""

    index: int
    template: str
    values: list[float]
    summary: dict[str, float | int]
    errored: frozenset[int] = frozenset()

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
    """Counts model requests by role and by phase of the search (for the summary), sent
    through the backends it wraps (`counting`: every endpoint's, llm/stack.py)."""

    def __init__(self) -> None:
        self.phase = "validation"
        self.by_role: Counter[str] = Counter()
        self.by_phase: Counter[str] = Counter()

    @property
    def total(self) -> int:
        return sum(self.by_role.values())

    def counting(self, inner: ChatClient) -> ChatClient:
        return CountedClient(inner, self)


class CountedClient:
    """One backend's requests, counted in its CallCounter."""

    def __init__(self, inner: ChatClient, counter: CallCounter) -> None:
        self.inner = inner
        self.counter = counter

    @property
    def base_url(self) -> object:
        """The server's, so the answer cache above the counter keys on it (llm/factory.py)."""
        return getattr(self.inner, "base_url", None)

    async def complete(self, request: ChatRequest) -> ChatResponse:
        self.counter.by_role[request.role] += 1
        self.counter.by_phase[self.counter.phase] += 1
        return await self.inner.complete(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


def better(challenger: Candidate, incumbent: Candidate) -> bool:
    """The E-GEO harness's rule: a candidate replaces the incumbent only when strictly
    better on validation. A tie keeps the incumbent: a proposal that changes nothing
    measurable (with a real model, sometimes the meta prompt echoed back) never wins.
    Compared on the rows both scored without error (paired, as the baseline gate is):
    rows that errored on the incumbent scored 0.0, and an identical proposal would
    otherwise win by them."""
    both = [i for i in range(min(len(challenger.values), len(incumbent.values)))
            if i not in challenger.errored and i not in incumbent.errored]
    return sum(challenger.values[i] - incumbent.values[i] for i in both) > 0


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
        self.history: list[dict[str, Any]] = []  # per proposal step, for {{history}}
        self._memo: dict[tuple[str, str], Scored] = {}
        self._errored: set[tuple[str, str]] = set()  # (template, row key) whose last score was an error
        self.val: Sequence[Example] = ()

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
                self._errored.discard(key)
            else:
                self._errored.add(key)
        return found

    def score_all(self, template: str, examples: Sequence[Example], phase: str | None = None) -> list[Scored]:
        self.templates.add(template)
        self._phase(phase or (examples[0].split if examples else "validation"))
        futures = [self.runner.submit(functools.partial(self._score, template, ex)) for ex in examples]
        return [future.result() for future in futures]

    # --- GEPAAdapter -----------------------------------------------------

    def evaluate(self, batch: list[Example], candidate: dict[str, str], capture_traces: bool = False) -> Any:
        from gepa.core.adapter import EvaluationBatch

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
        summary = self.task.summary(values)
        score = f"{describe(summary)} over {len(values)} training rows"
        # As the E-GEO harness: the training metrics, and the last 6 steps' (0-based iter).
        self.history.append({"iter": number - 1, "prompt_len": len(current), "train": summary})
        feedback = "\n".join(f"- {r.get('row')}: {r.get('Feedback')} (score {r.get('score')})" for r in records)
        fields = {
            "current_prompt": current,
            "feedback": feedback or "(no rows)",
            "examples": json.dumps(list(records), ensure_ascii=False, indent=2, default=str),
            "score": score,
            "required_placeholders": ", ".join("{{" + p + "}}" for p in self.reflection.required),
            "optional_placeholders": ", ".join("{{" + p + "}}" for p in self.reflection.optional),
            "batch_summary": json.dumps(summary, sort_keys=True),
            "history": json.dumps(self.history[-HISTORY:], indent=2, sort_keys=True),
        }
        def parse(text: str) -> str:
            answer = extract_json_object(text, "new_prompt")
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
        ids = sorted(scores)
        values = [float(scores[k]) for k in ids]
        template = event["candidate"][self.task.component]
        errored = frozenset(i for i, k in enumerate(ids) if isinstance(k, int) and 0 <= k < len(self.val)
                            and (template, self.val[k].key) in self._errored)
        candidate = Candidate(int(event["candidate_idx"]), template, values, self.task.summary(values), errored)
        self.candidates.append(candidate)
        if self.best is None or better(candidate, self.best):
            self.best = candidate
        name = "current prompt" if candidate.index == 0 else f"proposal {self.proposals}"
        errors = f" ({len(errored)} rows errored: left out of comparisons)" if errored else ""
        self.say(
            f"candidate {candidate.index} ({name}): validation {describe(candidate.summary)}{errors}"
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
        from gepa.api import optimize as gepa_optimize
        from gepa.utils import MaxCandidateProposalsStopper
    except ImportError:
        raise OptimizeError("optimize-prompts needs the gepa package: pip install 'pytest-geo[optimize]'") from None
    if not train or not val:
        raise OptimizeError("optimize-prompts needs at least one training and one validation row")
    check_budget(max_metric_calls, len(val))
    task.check(seed_template)
    state = _Search(task, reflection, runner, max_metric_calls, seed, counter, out or sys.stdout)
    state.val = list(val)
    # _Search implements the adapter and callback methods gepa calls; gepa's Protocols are
    # generic over trajectory types it never hands us, so they are not spelled out here.
    hooks: Any = state
    stopped = "iterations"
    try:
        gepa_optimize(
            seed_candidate={task.component: seed_template},
            trainset=list(train),
            valset=list(val),
            adapter=hooks,
            candidate_selection_strategy="pareto",
            skip_perfect_score=False,  # rank improvements have no fixed perfect score
            reflection_minibatch_size=min(MINIBATCH, len(train)),
            # Integer rank changes on a few rows tie often: a tie goes on to validation.
            acceptance_criterion="improvement_or_equal",
            max_metric_calls=max_metric_calls,
            stop_callbacks=MaxCandidateProposalsStopper(iters),
            logger=_Quiet(),
            callbacks=[hooks],
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
