"""What every optimize-prompts search shares: its options, where it writes, the
meta-optimizer's reflection, and writing the result (only after the search is over,
atomically, and the working template only with --apply)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from pytest_geo.data.files import unwritable, write_text_atomic
from pytest_geo.engine.answer_schemas import proposal_schema
from pytest_geo.engine.experiment import GeoEngine
from pytest_geo.engine.prompts import OPTIONAL_TEMPLATES, check_template
from pytest_geo.engine.session import GeoSession
from pytest_geo.llm.base import ChatClient
from pytest_geo.llm.budget import budget_status
from pytest_geo.llm.stack import ClientStack, build_stack, needed_models
from pytest_geo.llm.usage import cost_line, usage_lines
from pytest_geo.optimize.search import (
    REWRITER,
    CallCounter,
    Example,
    OptimizeError,
    PromptTask,
    Reflection,
    describe,
    search,
)
from pytest_geo.settings import Settings
from pytest_geo.templates import PromptError


@dataclass
class OptimizeOptions:
    train: Path | None = None
    val: Path | None = None
    iters: int = 5
    max_metric_calls: int | None = None
    apply: bool = False
    out: TextIO | None = None  # the prose; default: sys.stderr at call time (stdout: the JSON)
    suites: Path | None = None  # optimize the prompt procedures of a suites file instead


@dataclass(frozen=True)
class Outputs:
    """Where one search writes: the candidate, its scores, and (with --apply) the
    working template; `working` is None for a template written inline in code."""

    working: Path | None
    candidate: Path
    scores: Path


def check_outputs(outputs: Outputs, apply: bool) -> None:
    """Before any model call: every file the search will write can be written there, and
    with --apply the working template is no symbolic link. Found after the search, either
    would waste every call it paid for."""
    named = [("candidate", outputs.candidate), ("scores", outputs.scores)]
    if apply and outputs.working is not None:
        refuse_link(outputs.working, outputs.candidate)
        named.append(("working template (--apply)", outputs.working))
    for what, path in named:
        problem = unwritable(path)
        if problem:
            raise OptimizeError(f"{path}: cannot write the {what} there: {problem}; nothing was run")


def refuse_link(working: Path, candidate: Path) -> None:
    """--apply never replaces a symbolic link, nor writes through one: renaming over it
    would leave a plain file where the link was (the shared prompt it named unchanged),
    and writing to where it points would let a link planted in a cloned project overwrite
    any file the user can write with model-written text."""
    if working.is_symlink():
        raise OptimizeError(
            f"{working}: --apply would replace this symbolic link (to {os.readlink(working)}); it never writes "
            f"through one: run without --apply and copy {candidate} where the link points, or make {working} "
            "a plain file")


def counted_stack(settings: Settings, client: ChatClient | None) -> tuple[ClientStack, CallCounter]:
    """The run's client stacks (llm/stack.py; `client`: the default server's backend, if
    given), every endpoint's backend under one call counter; the optimizer's endpoint
    is checked at start too."""
    counter = CallCounter()
    needed = [*needed_models(settings), ("optimizer", settings.models["optimizer"])]
    return build_stack(settings, client, needed, wrap=counter.counting), counter


def reflection(engine: GeoEngine, prompts_dir: Path, required: Sequence[str], optional: Sequence[str]) -> Reflection:
    prompts = engine.prompts
    for name in ("meta_optimizer_system", "meta_optimizer_user"):
        text = getattr(prompts, name)
        if text is None:
            raise OptimizeError(f"{prompts_dir / (name + '.txt')}: prompt file not found (optimize-prompts needs it)")
        try:
            check_template(f"{name}.txt", text, *OPTIONAL_TEMPLATES[f"{name}.txt"], prompts_dir)
        except PromptError as exc:
            raise OptimizeError(str(exc)) from None

    def ask(system: str, user: str, context: Mapping[str, Any], parse: Callable[[str], str]) -> Awaitable[str]:
        return engine.ask("optimizer", system, user, context, parse, schema=proposal_schema())

    return Reflection(
        system=prompts.meta_optimizer_system or "",
        user=prompts.meta_optimizer_user or "",
        required=tuple(required),
        optional=tuple(optional),
        ask=ask,
    )


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
) -> dict[str, Any]:
    """Search, then write the candidate and its scores (and with --apply the working
    template): nothing is written before the search is over. Returns the result as the
    E-GEO harness's `optimize` prints it (see `harness_result`)."""
    out = options.out or sys.stderr
    settings = geo.settings
    original = outputs.working.read_bytes() if outputs.working is not None else None
    budget = "none" if options.max_metric_calls is None else str(options.max_metric_calls)
    print(
        f"optimize: {task.component}: {len(train)} training rows ({sources['train']}), {len(val)} "
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
        "validation_errors": {"current_prompt": len(baseline.errored), "best": len(best.errored)},
        "applied": False,
    }
    write_text_atomic(outputs.candidate, best.template)
    working = outputs.working
    applied = False
    errors = f"current prompt {len(baseline.errored)} of {m}, candidate {best.index} {len(best.errored)} of {m}"
    if options.apply and best.template != current:
        if baseline.errored or best.errored:
            # The comparison left those rows out, but what they would have scored is
            # unknown: a prompt chosen over them is not one to put in place unseen.
            scores["apply_refused"] = f"validation rows errored ({errors})"
            print(f"egeo: error: {task.component}: validation rows errored ({errors}); not applied: the "
                  f"comparison could not use them. Fix what failed and rerun, or review {outputs.candidate}",
                  file=sys.stderr)
        elif working is None:
            print(f"egeo: warning: {task.component}: the template is written inline; copy the candidate by hand",
                  file=sys.stderr)
        elif working.is_symlink() or working.read_bytes() != original:
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
    if baseline.errored or best.errored:
        print(f"validation rows with an error (left out of every comparison): {errors}", file=out)
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
    stayed = best.template == current
    if applied:
        print(f"applied: {working} replaced (candidate in {outputs.candidate}, scores in {outputs.scores})", file=out)
    elif stayed:
        print(f"the current prompt stayed best: nothing to apply (wrote {outputs.candidate} and {outputs.scores})",
              file=out)
    else:
        unchanged = f"; {working} unchanged" if working is not None else ""
        print(f"wrote {outputs.candidate} and {outputs.scores}{unchanged}", file=out)
    out.flush()
    saved_to = working if applied and working is not None else outputs.candidate
    return harness_result(best.index, best.template, best.summary, len(result.candidates), applied, saved_to,
                          {"scores_to": str(outputs.scores), **scores}, stayed=stayed)


def report_spend(geo: GeoSession, out: TextIO | None) -> None:
    """What the search's calls used and cost, and the budget, as `egeo evaluate` says them."""
    out = out or sys.stderr
    usage = geo.usage_table()
    if usage:
        print("model usage:", file=out)
        for line in usage_lines(usage):
            print(f"  {line}", file=out)
        if not geo.settings.mock:
            print(cost_line(usage, price_option="pytest's ini option geo_prices"), file=out)
    status = budget_status(geo.settings)
    if status is not None:
        print(status.line(), file=out)
        if status.reached is not None:
            print("egeo: the budget cut the search short: rows it could not score count as errors (0.0)",
                  file=out)
    out.flush()


APPLIED_HINT = "Optimized prompt applied to the working prompt file."
CANDIDATE_HINT = ("Optimized prompt written to candidate file; re-run with --apply to overwrite "
                  "the working prompt.")
STAYED_HINT = "The current prompt stayed best; nothing needed applying."


def harness_result(index: int, template: str, validation: Mapping[str, Any], history_len: int, applied: bool,
                   saved_to: Path, ours: Mapping[str, Any], stayed: bool = False) -> dict[str, Any]:
    """The JSON the E-GEO harness's `optimize` prints: `best` is the chosen prompt (`iter`
    its candidate number, 0 the current prompt) with its validation summary,
    `history_len` the prompts scored; our own keys follow, never replacing these."""
    harness = {
        "applied": applied,
        "best": {"iter": index, "prompt": template, "val": dict(validation)},
        "history_len": history_len,
        "saved_to": str(saved_to),
        "hint": APPLIED_HINT if applied else STAYED_HINT if stayed else CANDIDATE_HINT,
    }
    return {**{k: v for k, v in ours.items() if k not in harness}, **harness}
