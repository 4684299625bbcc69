"""The `egeo` command: `evaluate` and `optimize` (alias `optimize-prompts`) with the E-GEO
harness's output, and `init` (a starter project). `python -m pytest_geo` runs it too, as
the harness ran as a script."""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path

from pytest_geo import __version__
from pytest_geo.data.dataset import DatasetError, DatasetLine, GeoRow, RowProblem, iter_dataset, row_names
from pytest_geo.data.record import geo_record, problem_record
from pytest_geo.data.sampling import chosen_indices
from pytest_geo.engine.session import GeoSession, Outcome
from pytest_geo.llm.budget import BudgetError, budget_status, check_budget
from pytest_geo.llm.cache import make_ignored_pytest_cache
from pytest_geo.llm.factory import EGEO_FLAGS, ClientSetupError
from pytest_geo.llm.ledger import BudgetLimits, Ledger
from pytest_geo.local_server import placeholder_key_host
from pytest_geo.option_spec import EVALUATE, OPTIMIZE, OPTIONS, add_egeo_options
from pytest_geo.report.finish import take_counts
from pytest_geo.report.metadata import run_metadata
from pytest_geo.report.output import write_report_files
from pytest_geo.report.progress import RunProgress, stderr_progress
from pytest_geo.report.results import Results
from pytest_geo.report.stopping import Monitor, monitor_for, planned_row, rounds
from pytest_geo.report.terminal import comparison_lines, fact_lines, run_notes, written_lines
from pytest_geo.report.transcripts import TranscriptSpool
from pytest_geo.settings import (
    DEFAULT_CACHE_DIR,
    PYTEST_CACHE,
    ROLES,
    SettingError,
    Settings,
    build_settings,
    connection_help,
    find_prompts_dir,
)
from pytest_geo.templates import PromptError

VERBOSE_FIELDS = ("query_id", "target_id", "rank_before", "rank_after", "rank_improvement")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="egeo", description="E-GEO prompt evaluation (the engine behind pytest-geo).",
                                     epilog="Models" + connection_help("--").removeprefix("models") + ".")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    evaluate = commands.add_parser(EVALUATE, help="run the rank experiment over a JSONL dataset and print metrics")
    add_egeo_options(evaluate, EVALUATE)
    optimize = commands.add_parser(
        OPTIMIZE,
        aliases=["optimize-prompts"],
        help="search for a better rewriter prompt with GEPA (writes rewriter_user.candidate.txt); prints "
        "the E-GEO harness's result JSON on stdout, progress on stderr",
    )
    add_egeo_options(optimize, OPTIMIZE)
    init = commands.add_parser(
        "init", help="write a starter project: prompts/, an example dataset and suite, and pytest.ini"
    )
    init.add_argument("directory", type=Path, nargs="?", default=Path("."), metavar="DIR",
                      help="where to write it (default: the current directory)")
    return parser


def _settings(args: argparse.Namespace) -> Settings:
    """The settings the command's flags give; the flags another command has keep their defaults.
    Only evaluate has cache flags: optimize counts requests under the cache and so is never
    cached (see README)."""
    given = {option.key: getattr(args, option.key, None) for option in OPTIONS if option.setting}
    cache_dir = _cache_dir(args)
    given |= {
        "prompts_dir": find_prompts_dir(args.prompts),
        "front_end": "egeo",
        "cache_dir": cache_dir.resolve() if cache_dir is not None else None,
        "use_cache": cache_dir is not None and not args.no_cache,
        "variants": _variants(getattr(args, "variant", [])),
    }
    models = {role: getattr(args, f"{role}_model", None) for role in ROLES}
    return build_settings(given, models)


def _cache_dir(args: argparse.Namespace) -> Path | None:
    """evaluate's answer cache (None under optimize, which has no cache flags)."""
    if args.command != EVALUATE:
        return None
    return Path(args.cache_dir) if args.cache_dir else DEFAULT_CACHE_DIR


def _variants(named: Sequence[tuple[str, str]]) -> dict[str, Path]:
    variants: dict[str, Path] = {}
    for name, path in named:
        if name in variants:
            build_parser().error(f"--variant: variant {name!r} is given twice")
        variants[name] = Path(path)
    return variants


def _selected_lines(path: Path, settings: Settings) -> tuple[list[str], list[DatasetLine]]:
    """The rows --limit and --sample keep, with their names: the plugin's rule, so
    `egeo evaluate --sample N` and `pytest --geo-sample N` run the same rows."""
    if settings.sample is None:  # no names needed beyond the limit: read only that far
        lines = list(itertools.islice(iter_dataset(path, settings.seed), settings.limit))
        return row_names(lines), lines
    lines = list(iter_dataset(path, settings.seed))
    names = row_names(lines)
    keep = chosen_indices(names, settings.limit, settings.sample, settings.seed)
    return [names[i] for i in keep], [lines[i] for i in keep]


def _run_rows(geo: GeoSession, rows: list[GeoRow], progress: RunProgress | None) -> Iterator[Outcome]:
    """Each row's outcome in order, as it is ready: the caller records it (its transcript
    goes to the spool) before the next, so finished rows' calls do not pile up in memory."""
    geo.schedule_many(rows)
    for row in rows:
        if progress is not None:
            progress.wait_for(row)
        yield geo.outcome(row)


def evaluate(args: argparse.Namespace) -> int:
    settings = _settings(args)
    if settings.sequential and len(settings.variants) < 2:
        build_parser().error("--sequential needs two or more --variant to compare")
    if settings.margin is not None and not settings.sequential:
        build_parser().error("--margin needs --sequential")
    check_budget(settings, ("--budget", "--budget-tokens"), "pytest's ini option geo_prices (egeo reads the "
                 "built-in table only)")
    if not BudgetLimits.of(settings).active:
        return _evaluate(args, settings)
    ledger = settings.budget_ledger = Ledger.create()
    try:
        return _evaluate(args, settings)
    finally:
        ledger.unlink(missing_ok=True)


def _evaluate(args: argparse.Namespace, settings: Settings) -> int:
    started, clock = time.time(), time.perf_counter()
    dataset = str(args.dataset)
    jobs, problems = _jobs(args.dataset, settings)
    for _, problem in problems:
        print(problem, file=sys.stderr)
    local = placeholder_key_host(settings)
    if local is not None:
        print(f"egeo: no OPENAI_API_KEY: a placeholder key for the local server {local}", file=sys.stderr)
    results = Results(transcripts=TranscriptSpool(keep=bool(args.report or args.html)))
    results.sequential = _monitor(settings, jobs) if settings.sequential else None
    geo = GeoSession(settings)
    try:
        geo.engine  # noqa: B018 (built for its errors): a missing or broken prompt is one error before any row runs
        geo.variant_prompts  # noqa: B018 (a broken variant, or one changing the ranker's prompts, is an error)
        if settings.use_cache and not settings.mock and _cache_dir(args) == DEFAULT_CACHE_DIR:
            make_ignored_pytest_cache(PYTEST_CACHE)
        _run(geo, jobs, results, verbose=args.verbose)
    finally:
        geo.close()
    take_counts(results, geo)  # the plugin's records, aggregation and summary, so egeo and pytest cannot drift
    results.budget = budget_status(settings)
    for name, problem in problems:
        results.add(problem_record(problem, suite=dataset, split="train", nodeid=f"{dataset}::{name}"))
    # stderr: stdout stays the E-GEO harness's metrics JSON
    for line in [*run_notes(results, settings.mock, "pytest's ini option geo_prices"), *fact_lines(results),
                 *_partial(results, geo.stopped), *comparison_lines(results)]:
        print(line, file=sys.stderr)
    print(json.dumps(_metrics(results, settings, dataset), indent=2, sort_keys=True))
    _write_reports(args, results, settings, started, time.perf_counter() - clock)
    failed = results.problems or results.write_errors or not results.complete
    return 1 if failed or any(r["error"] is not None for r in results.records if r["kind"] == "geo") else 0


def _jobs(path: Path, settings: Settings) -> tuple[list[Job], list[tuple[str, RowProblem]]]:
    """The rows to run, as (node id, suite, row), named as the plugin names them (with
    variants one per row and variant), and the malformed lines with their names."""
    names, lines = _selected_lines(path, settings)
    dataset = str(path)
    jobs = [(f"{dataset}::{name}", dataset, line) for name, line in zip(names, lines, strict=True)
            if isinstance(line, GeoRow)]
    if settings.variants:
        jobs = [(f"{nodeid}[{v}]", f"{suite}[{v}]", replace(row, variant=v))
                for nodeid, suite, row in jobs for v in settings.variants]
    return jobs, [(name, line) for name, line in zip(names, lines, strict=True) if isinstance(line, RowProblem)]


def _run(geo: GeoSession, jobs: Sequence[Job], results: Results, verbose: bool) -> None:
    """Every job, a round at a time under --sequential; each row's record as the plugin
    makes it, in order, as it is ready."""
    progress = stderr_progress(geo, len(jobs))  # under --sequential, counting every round's rows
    for batch in _rounds(jobs, results.sequential):
        results.selected.update(nodeid for nodeid, _, _ in batch)
        outcomes = _run_rows(geo, [row for _, _, row in batch], progress)
        for (nodeid, suite, row), outcome in zip(batch, outcomes, strict=True):
            if outcome.not_run:  # never sent (the budget, a server found unusable): no score
                continue
            record = geo_record(row, outcome.record(), suite=suite, split="train", nodeid=nodeid)
            results.add(record)
            if results.sequential is not None:
                results.sequential.add(record)
            if outcome.error is not None:
                print(f"{suite}: {outcome.query_id or outcome.target_id}: error: {outcome.error}", file=sys.stderr)
            if verbose:
                print(json.dumps(verbose_line(outcome)))


def _partial(results: Results, stopped: str | None) -> list[str]:
    stopped = stopped or results.budget_reached
    if stopped is None or results.complete:
        return []
    return [f"egeo: partial run: {results.not_run} of {len(results.selected)} rows did not run ({stopped}); "
            "the metrics cover only the rows that ran"]


def _metrics(results: Results, settings: Settings, dataset: str) -> object:
    """The E-GEO harness's metrics JSON; with variants, one per variant."""
    if not settings.variants:
        return results.geo_overall().as_geo()
    metrics = {name: s.as_geo() for name, s in results.geo_suites().items()}
    return {v: metrics.get(f"{dataset}[{v}]") for v in settings.variants}


def _write_reports(args: argparse.Namespace, results: Results, settings: Settings, started: float,
                   duration: float) -> None:
    if args.report or args.html:
        results.metadata = run_metadata(settings, started, duration)
    write_report_files(results, args.report, args.html, who="egeo", flags=("--report", "--html"))
    for line in written_lines(results, (("--report", "report", args.report), ("--html", "HTML report", args.html))):
        print(line, file=sys.stderr)
    for error in results.write_errors:
        print(error, file=sys.stderr)


Job = tuple[str, str, GeoRow]  # node id, suite, row


def _monitor(settings: Settings, jobs: Sequence[Job]) -> Monitor:
    return monitor_for([planned_row(nodeid, suite, "train", row.variant, len(row.candidates))
                        for nodeid, suite, row in jobs], settings)


def _rounds(jobs: Sequence[Job], monitor: Monitor | None) -> Iterator[list[Job]]:
    """Every row at once; under --sequential a round at a time (report/stopping.py)."""
    if monitor is None:
        yield list(jobs)
        return
    by_nodeid = {job[0]: job for job in jobs}
    for nodeids in rounds(monitor):
        yield [by_nodeid[n] for n in nodeids]


def verbose_line(outcome: Outcome) -> dict[str, object]:
    """A row as the E-GEO harness prints it: a missing query_id is "", rank_improvement a
    float (null only for a row whose experiment failed; with repeats, their mean)."""
    record: dict[str, object] = dict(outcome.record())
    improvement = outcome.record().get("rank_improvement")
    return {
        **{k: record[k] for k in VERBOSE_FIELDS},
        "query_id": outcome.query_id or "",
        "rank_improvement": float(improvement) if improvement is not None else None,
    }


def init(args: argparse.Namespace) -> int:
    from pytest_geo.starter import write_starter

    written, skipped, notes = write_starter(args.directory)
    for path in written:
        print(f"wrote {path}")
    for path, why in skipped:
        print(f"skipped {path} ({why})")
    for note in notes:
        print(note)
    return 0


def optimize_prompts(args: argparse.Namespace) -> int:
    from pytest_geo.optimize import OptimizeOptions, optimize_prompts

    if args.suites is None and (args.train is None or args.val is None):
        build_parser().error(f"{args.command} needs --train and --val, or --suites FILE")
    options = OptimizeOptions(args.train, args.val, args.iters, args.max_metric_calls, args.apply, suites=args.suites)
    result = optimize_prompts(_settings(args), options)
    print(json.dumps(result, indent=2, sort_keys=True))  # as the harness prints it
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    from pytest_geo.optimize import OptimizeError

    args = build_parser().parse_args(argv)
    try:
        if args.command == "evaluate":
            return evaluate(args)
        if args.command in ("optimize", "optimize-prompts"):
            return optimize_prompts(args)
        if args.command == "init":
            return init(args)
    except ClientSetupError as exc:
        print(f"egeo: error: {exc.naming(EGEO_FLAGS)}", file=sys.stderr)
        return 2
    except (DatasetError, PromptError, OptimizeError, SettingError, BudgetError) as exc:
        print(f"egeo: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("egeo: interrupted", file=sys.stderr)
        return 130
    return 2


if __name__ == "__main__":
    sys.exit(main())
