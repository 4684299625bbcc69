"""A prompt procedure scored by its same-named suite as a PromptTask, and
`egeo optimize-prompts --suites FILE`."""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from pytest_geo.engine.session import GeoSession
from pytest_geo.llm.base import ChatClient
from pytest_geo.optimize.run import (
    OptimizeOptions,
    Outputs,
    check_outputs,
    counted_stack,
    reflection,
    report_spend,
    search_and_write,
)
from pytest_geo.optimize.search import Example, OptimizeError, Scored, check_budget
from pytest_geo.scoring import Score, summarize
from pytest_geo.settings import Settings
from pytest_geo.suites.procedures import (
    PromptProcedure,
    running_with,
    template_override,
    tracing,
)
from pytest_geo.suites.suite import (
    Metric,
    Suite,
    SuiteError,
    load_rows,
    score_metric,
    suites_in,
)
from pytest_geo.templates import placeholders


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


def _outputs(procedure: PromptProcedure, suites_file: Path) -> Outputs:
    """Beside the procedure's template file, or (written inline) beside the suites file."""
    if procedure.source is not None:
        stem = procedure.source.with_suffix("")
        return Outputs(procedure.source, Path(f"{stem}.candidate.txt"), Path(f"{stem}.optimized_scores.json"))
    base = suites_file.parent / procedure.name
    return Outputs(None, Path(f"{base}.candidate.txt"), Path(f"{base}.optimized_scores.json"))


def _check_procedures(procedures: Sequence[PromptProcedure], suites: dict[str, Suite],
                      options: OptimizeOptions) -> dict[str, Outputs]:
    """Each procedure's outputs by its name, once each has its suite and every file it
    will write can be written: all before the first model call."""
    assert options.suites is not None
    found = {}
    for procedure in procedures:
        if procedure.name not in suites:
            raise OptimizeError(
                f"{options.suites}: prompt procedure {procedure.name!r} is marked optimize=True "
                f"but no eval suite is named {procedure.name!r}"
            )
        found[procedure.name] = _outputs(procedure, options.suites)
        check_outputs(found[procedure.name], options.apply)
    return found


def optimize_suite_prompts(settings: Settings, options: OptimizeOptions,
                           client: ChatClient | None = None) -> dict[str, Any]:
    """Kedi's rule: every prompt procedure marked `optimize=True` needs a same-named eval
    suite; its `data` drives the proposals and its `test_data` chooses the best (its
    `data` again when it has none). Returns each procedure's result JSON by its name."""
    assert options.suites is not None
    module = load_suites_file(options.suites)
    procedures = [p for p in vars(module).values() if isinstance(p, PromptProcedure) and p.optimize]
    if not procedures:
        raise OptimizeError(f"{options.suites}: no prompt procedure is marked optimize=True")
    suites = {s.name: s for s in suites_in(module)}
    outputs = _check_procedures(procedures, suites, options)
    stack, counter = counted_stack(settings, client)
    geo = GeoSession(settings, stack)
    results: dict[str, Any] = {}
    try:
        for procedure in procedures:
            suite = suites[procedure.name]
            try:
                metric = suite.check()
            except SuiteError as exc:
                raise OptimizeError(str(exc)) from None
            if metric.is_geo:
                raise OptimizeError(f"suite {suite.name!r}: optimize the GEO rewriter with --train/--val instead")
            if metric.dataset_free:  # Kedi's legacy form: it runs once, with no rows to learn from
                raise OptimizeError(f"suite {suite.name!r}: metric {metric.name!r} names no dataset; optimizing "
                                    "needs rows (give the metric a dataset parameter)")
            train = _suite_examples(suite, metric, suite.data[metric.dataset], "train", settings.seed)
            val_spec = suite.test_data.get(metric.dataset, suite.data[metric.dataset])
            val = _suite_examples(suite, metric, val_spec, "validation", settings.seed)
            if not train or not val:
                raise OptimizeError(f"suite {suite.name!r}: dataset {metric.dataset!r} has no rows")
            check_budget(options.max_metric_calls, len(val))
            meta = reflection(geo.engine, Path(settings.prompts_dir), sorted(placeholders(procedure.template)), ())
            which = "test_data" if metric.dataset in suite.test_data else "data (no test_data)"
            results[procedure.name] = search_and_write(
                SuitePromptTask(procedure, suite, metric, geo),
                procedure.template,
                train,
                val,
                meta,
                geo,
                counter,
                options,
                outputs[procedure.name],
                {"train": f"{options.suites}::{suite.name} data", "val": f"{options.suites}::{suite.name} {which}"},
            )
    finally:
        geo.close()
        report_spend(geo, options.out)
    return results
