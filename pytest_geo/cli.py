"""The `egeo` command: `evaluate` (the E-GEO harness's output) and `optimize-prompts`."""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from pytest_geo.data.dataset import DatasetError, iter_dataset, row_names, split_lines
from pytest_geo.data.record import geo_record, problem_record
from pytest_geo.engine.session import GeoSession
from pytest_geo.llm.cache import make_ignored_pytest_cache
from pytest_geo.llm.factory import ClientSetupError
from pytest_geo.options import any_int, concurrency, positive_int
from pytest_geo.report.concurrency import stats_line
from pytest_geo.report.results import Results
from pytest_geo.report.terminal import fact_lines
from pytest_geo.settings import (
    DEFAULT_CONCURRENCY,
    DEFAULT_MAX_CONCURRENCY,
    DEFAULT_SEED,
    MOCK_ENV,
    ROLES,
    Settings,
    build_settings,
)
from pytest_geo.templates import PromptError

VERBOSE_FIELDS = ("query_id", "target_id", "rank_before", "rank_after", "rank_improvement")
# The pytest plugin's default cache (<rootdir>/.pytest_cache/d/geo): run from the rootdir,
# egeo and pytest share answers.
PYTEST_CACHE = Path(".pytest_cache")
DEFAULT_CACHE_DIR = PYTEST_CACHE / "d" / "geo"


def _common(parser: argparse.ArgumentParser, seed_help: str = "seed for missing target_ids") -> None:
    parser.add_argument(
        "--mock", action="store_true", help=f"offline deterministic mock model ({MOCK_ENV}=1 works too)"
    )
    parser.add_argument(
        "--prompts", type=Path, default=Path("prompts"), metavar="DIR", help="prompts directory (default: prompts)"
    )
    parser.add_argument("--seed", type=any_int, default=None, help=f"{seed_help} (default: {DEFAULT_SEED})")
    parser.add_argument(
        "--concurrency",
        type=concurrency,
        default=None,
        metavar="N|auto",
        help="most rows in flight, at most 2N model requests; auto (the default) starts at "
        f"{DEFAULT_CONCURRENCY} and adapts to the server's rate limits",
    )
    parser.add_argument(
        "--max-concurrency",
        type=positive_int,
        default=None,
        metavar="N",
        help=f"upper bound of --concurrency auto (default: {DEFAULT_MAX_CONCURRENCY})",
    )
    parser.add_argument(
        "--base-url", default=None, metavar="URL", help="OpenAI-compatible server (env: OPENAI_BASE_URL)"
    )
    parser.add_argument("--ranker-model", default=None, metavar="M", help="ranker model (env: RANKER_MODEL)")
    parser.add_argument("--rewriter-model", default=None, metavar="M", help="rewriter model (env: REWRITER_MODEL)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="egeo", description="E-GEO prompt evaluation (the engine behind pytest-geo).")
    commands = parser.add_subparsers(dest="command", required=True)
    evaluate = commands.add_parser("evaluate", help="run the rank experiment over a JSONL dataset and print metrics")
    evaluate.add_argument("--dataset", type=Path, required=True, metavar="PATH", help="GEO JSONL dataset")
    evaluate.add_argument(
        "--limit", type=positive_int, default=None, metavar="N", help="evaluate only the first N rows"
    )
    evaluate.add_argument("--verbose", action="store_true", help="print one JSON line per row before the metrics")
    evaluate.add_argument(
        "--cache-dir",
        type=Path,
        default=DEFAULT_CACHE_DIR,
        metavar="DIR",
        help=f"model-answer cache (default: {DEFAULT_CACHE_DIR}, the pytest plugin's default when "
        "this directory is pytest's rootdir, so the two share answers); the mock is never cached",
    )
    evaluate.add_argument("--no-cache", action="store_true", help="neither read nor write the model-answer cache")
    evaluate.add_argument("--batch", action="store_true",
                          help="send the model calls through the OpenAI Batch API (about half the price); "
                          "batch ids are kept in the cache directory, so an interrupted run resumes them")
    _common(evaluate)
    optimize = commands.add_parser(
        "optimize-prompts",
        help="search for a better rewriter prompt with GEPA (writes rewriter_user.candidate.txt)",
    )
    optimize.add_argument(
        "--train", type=Path, default=None, metavar="PATH", help="GEO JSONL rows that drive the proposals"
    )
    optimize.add_argument(
        "--val", type=Path, default=None, metavar="PATH", help="GEO JSONL rows that choose the best candidate"
    )
    optimize.add_argument(
        "--suites",
        type=Path,
        default=None,
        metavar="FILE",
        help="instead of --train/--val: a Python file whose prompt procedures marked "
        "optimize=True are each scored by their same-named eval suite",
    )
    optimize.add_argument("--iters", type=positive_int, default=3, metavar="N", help="proposals to try (default: 3)")
    optimize.add_argument(
        "--max-metric-calls",
        type=positive_int,
        default=None,
        metavar="N",
        help="most row evaluations (one candidate on one row) in the search",
    )
    optimize.add_argument("--apply", action="store_true", help="also replace rewriter_user.txt with the best candidate")
    optimize.add_argument("--optimizer-model", default=None, metavar="M", help="meta-optimizer model (env: META_MODEL)")
    _common(optimize, seed_help="seed for the search and for missing target_ids")
    return parser


def _settings(args: argparse.Namespace) -> Settings:
    # Only evaluate has cache flags: optimize-prompts counts requests under the cache and
    # so is never cached (see README).
    cache_dir = getattr(args, "cache_dir", None)
    given = {
        "mock": args.mock,
        "seed": args.seed,
        "prompts_dir": args.prompts,
        "concurrency": args.concurrency,
        "max_concurrency": args.max_concurrency,
        "batch": getattr(args, "batch", False),
        "base_url": args.base_url,
        "cache_dir": cache_dir.resolve() if cache_dir is not None else None,
        "use_cache": cache_dir is not None and not args.no_cache,
    }
    models = {role: getattr(args, f"{role}_model", None) for role in ROLES}
    return build_settings(given, models)


def evaluate(args: argparse.Namespace) -> int:
    settings = _settings(args)
    lines = list(itertools.islice(iter_dataset(args.dataset, settings.seed), args.limit))
    rows, problems = split_lines(lines)
    for problem in problems:
        print(problem, file=sys.stderr)
    geo = GeoSession(settings)
    try:
        geo.engine  # noqa: B018 (built for its errors): a missing or broken prompt is one error before any row runs
        if settings.use_cache and not settings.mock and args.cache_dir == DEFAULT_CACHE_DIR:
            make_ignored_pytest_cache(PYTEST_CACHE)
        outcomes = geo.evaluate(rows)
    finally:
        geo.close()
    print(stats_line(geo.concurrency_stats().as_json()), file=sys.stderr)
    # The plugin's records and aggregation, so `egeo` and pytest cannot drift.
    dataset = str(args.dataset)
    results = Results()
    names = dict(zip([line.line for line in lines], row_names(lines), strict=True))
    for row, outcome in zip(rows, outcomes, strict=True):
        record = geo_record(row, outcome.record(), suite=dataset, split="train", nodeid=f"{dataset}::{names[row.line]}")
        results.add(record)
        if outcome.error is not None:
            print(f"{dataset}: {outcome.query_id or outcome.target_id}: error: {outcome.error}", file=sys.stderr)
        if args.verbose:
            shown: dict[str, object] = dict(record)
            print(json.dumps({k: shown[k] for k in VERBOSE_FIELDS}))
    for problem in problems:
        results.add(problem_record(problem, suite=dataset, split="train", nodeid=f"{dataset}::{names[problem.line]}"))
    for line in fact_lines(results):
        print(line, file=sys.stderr)  # stdout stays the E-GEO harness's metrics JSON
    print(json.dumps(results.geo_overall().as_geo(), indent=2, sort_keys=True))
    return 1 if results.problems or any(r["error"] is not None for r in results.records if r["kind"] == "geo") else 0


def optimize_prompts(args: argparse.Namespace) -> int:
    from pytest_geo.optimize import OptimizeOptions, optimize_prompts

    if args.suites is None and (args.train is None or args.val is None):
        build_parser().error("optimize-prompts needs --train and --val, or --suites FILE")
    options = OptimizeOptions(args.train, args.val, args.iters, args.max_metric_calls, args.apply, suites=args.suites)
    return optimize_prompts(_settings(args), options)


def main(argv: Sequence[str] | None = None) -> int:
    from pytest_geo.optimize import OptimizeError

    args = build_parser().parse_args(argv)
    try:
        if args.command == "evaluate":
            return evaluate(args)
        if args.command == "optimize-prompts":
            return optimize_prompts(args)
    except (DatasetError, PromptError, ClientSetupError, OptimizeError) as exc:
        print(f"egeo: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("egeo: interrupted", file=sys.stderr)
        return 130
    return 2


if __name__ == "__main__":
    sys.exit(main())
