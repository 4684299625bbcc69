"""The GEO rewriter prompt as a PromptTask, and `egeo optimize-prompts --train/--val`."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pytest_geo.data.dataset import GeoRow, iter_dataset, split_lines
from pytest_geo.engine.experiment import GeoEngine
from pytest_geo.engine.prompts import REWRITER_VARS, TEMPLATES
from pytest_geo.engine.session import GeoSession
from pytest_geo.engine.shared_rank import Place
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
from pytest_geo.optimize.search import (
    REWRITER,
    Example,
    OptimizeError,
    Scored,
    check_budget,
)
from pytest_geo.scoring import summarize
from pytest_geo.settings import Settings, is_packaged


class GeoRewriterTask:
    """The rewriter prompt scored by the rank experiment. `rank_before` does not depend
    on the prompt, so it is computed once per row and shared by every candidate."""

    component = REWRITER

    def __init__(self, engine: GeoEngine) -> None:
        self.engine = engine
        self._before: dict[str, asyncio.Task[Place]] = {}

    def check(self, template: str) -> None:
        self.engine.prompts.with_rewriter_user(template)

    def _rank_before(self, example: Example) -> asyncio.Task[Place]:
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
    rows, problems = split_lines(iter_dataset(path, seed))
    if problems:
        more = f" (and {len(problems) - 1} more malformed lines)" if len(problems) > 1 else ""
        raise OptimizeError(f"{problems[0]}{more}")
    if not rows:
        raise OptimizeError(f"{path}: no rows")
    return [Example(split, row_key(row), row.label, row) for row in rows]


def optimize_prompts(settings: Settings, options: OptimizeOptions,
                     client: ChatClient | None = None) -> dict[str, Any]:
    """`egeo optimize --train --val`; returns the harness's result JSON."""
    assert options.train is not None and options.val is not None
    prompts_dir = Path(settings.prompts_dir)
    if is_packaged(prompts_dir):
        raise OptimizeError(
            f"{prompts_dir}: these are the prompts shipped with pytest-geo, and optimize-prompts writes beside "
            "the working prompt: run `egeo init` for a prompts/ directory of your own, or pass --prompts DIR"
        )
    outputs = Outputs(
        prompts_dir / "rewriter_user.txt",
        prompts_dir / "rewriter_user.candidate.txt",
        prompts_dir / "rewriter_user.optimized_scores.json",
    )
    check_outputs(outputs, options.apply)
    train = load_examples(options.train, "train", settings.seed)
    val = load_examples(options.val, "validation", settings.seed)
    check_budget(options.max_metric_calls, len(val))
    stack, counter = counted_stack(settings, client)
    geo = GeoSession(settings, stack)
    try:
        required = tuple(sorted(TEMPLATES["rewriter_user.txt"][1]))
        meta = reflection(geo.engine, prompts_dir, required, sorted(REWRITER_VARS - set(required)))
        return search_and_write(
            GeoRewriterTask(geo.engine), geo.prompts.rewriter_user, train, val, meta, geo, counter,
            options, outputs, {"train": str(options.train), "val": str(options.val)},
        )
    finally:
        geo.close()
        report_spend(geo, options.out)
