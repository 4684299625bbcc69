"""E-GEO's rewriting rule (`--geo-query-blind`, on for E-GEO data): the rewriter sees only
the target's own text, never the query, so a rewrite cannot be tailored to the question it
is scored on. A rewriter prompt that uses the query is a usage error before any call; the
packaged prompts' rewriter, which uses it, gives way to the packaged `simple` style.

With E-GEO data the packaged prompts' ranker gives way to E-GEO's too (prompts/egeo/):
numbered products, and the answer `{"ranking": [...], "questionable_products": [...]}`
whose flags the report counts. A prompts directory of the user's keeps its own ranker."""

from __future__ import annotations

from dataclasses import replace

from pytest_geo.engine.prompts import PromptSet, load_prompts
from pytest_geo.engine.styles import PROMPTS, style_path
from pytest_geo.engine.variants import load_variants
from pytest_geo.settings import Settings, is_packaged
from pytest_geo.templates import PromptError, placeholders

# What a query-blind rewriter prompt must not use: everything but the target's own text.
QUERY_VARS = frozenset({"query", "query_id"})
EGEO_RANKER = PROMPTS / "egeo"  # E-GEO's ranker prompts: its answer, its products' layout


def run_prompts(settings: Settings) -> PromptSet:
    """The run's prompt set: the prompts directory's; when the prompts are the packaged
    ones, the `simple` style as the rewriter's user prompt in a query-blind run, and
    E-GEO's ranker prompts in a run of E-GEO data."""
    prompts = load_prompts(settings.prompts_dir)
    simple = style_path("simple")
    if settings.query_blind and is_packaged(settings.prompts_dir) and simple is not None:
        prompts = replace(prompts, rewriter_user=simple.read_text(encoding="utf-8"))
    if settings.egeo_data and is_packaged(settings.prompts_dir):
        prompts = replace(prompts, ranker_system=(EGEO_RANKER / "ranker_system.txt").read_text(encoding="utf-8"),
                          ranker_user=(EGEO_RANKER / "ranker_user.txt").read_text(encoding="utf-8"))
    return prompts


def check_query_blind(settings: Settings) -> None:
    """PromptError naming the first rewriter prompt (the run's or a variant's) that uses
    the query in a query-blind run; nothing otherwise."""
    if not settings.query_blind:
        return
    prompts = run_prompts(settings)
    sets = [("", prompts.directory, prompts)]
    sets += [(f"variant {v.name}: ", v.source, v.prompts(prompts)) for v in load_variants(settings.variants)]
    for where, source, prompt_set in sets:
        for name in ("rewriter_system", "rewriter_user"):
            used = sorted(placeholders(getattr(prompt_set, name)) & QUERY_VARS)
            if used:
                raise PromptError(f"{where}{source}: the {name.replace('_', ' ')} prompt uses "
                                  f"{{{{{used[0]}}}}}, but the run is query-blind (--geo-query-blind, on for E-GEO "
                                  "data): the rewriter may see only the target's own title and description")
