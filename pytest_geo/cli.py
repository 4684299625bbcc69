"""The `egeo` command: `evaluate` and `optimize` (alias `optimize-prompts`) with the E-GEO
harness's output, and `init` (a starter project). `python -m pytest_geo` runs it too, as
the harness ran as a script."""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from pytest_geo import __version__
from pytest_geo.data.dataset import DatasetError, DatasetLine, GeoRow, RowProblem, iter_dataset, row_names
from pytest_geo.data.egeo_data import dataset_split, is_egeo_data
from pytest_geo.data.record import geo_record, problem_record
from pytest_geo.data.sampling import chosen_indices
from pytest_geo.engine.query_blind import check_query_blind
from pytest_geo.engine.session import GeoSession, Outcome
from pytest_geo.judge import judges_from
from pytest_geo.llm.budget import BudgetError, budget_status, check_budget
from pytest_geo.llm.cache import make_ignored_pytest_cache
from pytest_geo.llm.factory import EGEO_FLAGS, ClientSetupError
from pytest_geo.llm.ledger import BudgetLimits, Ledger
from pytest_geo.llm.prices import PriceError, parse_price_lines
from pytest_geo.local_server import placeholder_key_host
from pytest_geo.option_spec import EVALUATE, OPTIMIZE, OPTIONS, add_egeo_options
from pytest_geo.options import variant_model
from pytest_geo.price import Price
from pytest_geo.project_config import ProjectConfig, ProjectConfigError, find_config, project_dataset
from pytest_geo.report.egeo_submission import SubmissionError, check_judge_keys, write_submission
from pytest_geo.report.finish import take_counts
from pytest_geo.report.metadata import run_metadata
from pytest_geo.report.output import OutputPathError, check_output_paths, prompt_inputs, write_report_files
from pytest_geo.report.progress import RunProgress, stderr_progress
from pytest_geo.report.results import Results
from pytest_geo.report.stopping import Monitor, monitor_for, planned_row, rounds
from pytest_geo.report.terminal import (
    comparison_lines,
    fact_lines,
    flag_lines,
    panel_lines,
    red_team_lines,
    run_notes,
    written_lines,
)
from pytest_geo.report.transcripts import TranscriptSpool
from pytest_geo.scoring import Summary
from pytest_geo.settings import (
    DEFAULT_CACHE_DIR,
    PYTEST_CACHE,
    ROLES,
    SettingError,
    Settings,
    build_settings,
    connection_help,
    describe_prompts,
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
    score = commands.add_parser(
        "score", help="score the rewrites in --rewrites FILE (E-GEO's rewrites.jsonl) with the rankers only, "
        "no rewriter call; otherwise as evaluate")
    add_egeo_options(score, EVALUATE)
    plan = commands.add_parser(
        "plan", help="print what evaluate (or score) with the same flags would call and cost, calling no model")
    add_egeo_options(plan, EVALUATE)
    merge = commands.add_parser(
        "merge", help="merge JSON reports of shards (--geo-shard K/N) into one report, as one run over all "
        "their rows; prints the metrics JSON")
    merge.add_argument("reports", type=Path, nargs="+", metavar="REPORT", help="JSON reports (--geo-report) to merge")
    merge.add_argument("--report", required=True, metavar="PATH", help="write the merged JSON report to PATH")
    merge.add_argument("--html", metavar="PATH", help="also write the merged HTML report to PATH")
    init = commands.add_parser(
        "init", help="write a starter project: prompts/, an example dataset and suite, and pytest.ini"
    )
    init.add_argument("directory", type=Path, nargs="?", default=Path("."), metavar="DIR",
                      help="where to write it (default: the current directory)")
    return parser


def _settings(args: argparse.Namespace, project: ProjectConfig | None = None) -> Settings:
    """The settings the command's flags give; the flags another command has keep their defaults.
    `project`: the pytest configuration whose geo_prompts applies when --prompts is not given."""
    given = {option.key: getattr(args, option.key, None) for option in OPTIONS if option.setting}
    cache_dir = _cache_dir(args)
    ini_prompts = project.get("geo_prompts") if project is not None else []
    given |= {
        "prompts_dir": find_prompts_dir(args.prompts, ini_prompts[0] if ini_prompts else None,
                                        project.rootdir if project is not None else None),
        "front_end": "egeo",
        "cache_dir": cache_dir.resolve() if cache_dir is not None else None,
        "use_cache": cache_dir is not None and not args.no_cache,
        "endpoints": {endpoint.name: endpoint for endpoint in args.endpoint},
        "prices": _prices(project),
    }
    given["variants"], given["variant_models"] = _variants(getattr(args, "variant", []))
    # E-GEO's data comes with its rule (the rewriter never sees the query) and its ranker.
    given["egeo_data"] = is_egeo_data(getattr(args, "dataset", None) or "")
    given["query_blind"] = bool(given.get("query_blind")) or given["egeo_data"]
    given["rewrites"] = Path(args.rewrites) if getattr(args, "rewrites", None) else None
    try:
        given["judges"] = judges_from(getattr(args, "judge", []), "--judge", Path.cwd())
    except ValueError as exc:
        build_parser().error(str(exc))
    models = {role: getattr(args, f"{role}_model", None) for role in ROLES}
    return build_settings(given, models)


def _prices(project: ProjectConfig | None) -> dict[str, Price]:
    """The project's geo_prices lines (pytest's ini option), read as the plugin reads them."""
    if project is None:
        return {}
    try:
        return parse_price_lines(project.lines("geo_prices"))
    except PriceError as exc:
        raise SettingError(f"{project.path}: ini option geo_prices: {exc}") from None


def _cache_dir(args: argparse.Namespace) -> Path:
    return Path(args.cache_dir) if args.cache_dir else DEFAULT_CACHE_DIR


def _variants(named: Sequence[tuple[str, str]]) -> tuple[dict[str, Path], dict[str, str]]:
    """The variants' paths and, from `PATH@MODEL`, their rewriter models."""
    variants: dict[str, Path] = {}
    models: dict[str, str] = {}
    for name, given in named:
        if name in variants:
            build_parser().error(f"--variant: variant {name!r} is given twice")
        path, model = variant_model(given)
        variants[name] = Path(path)
        if model is not None:
            models[name] = model
    return variants, models


def _selected_lines(path: Path, settings: Settings) -> tuple[list[str], list[DatasetLine]]:
    """The rows --limit, --sample and --shard keep, with their names: the plugin's rule, so
    `egeo evaluate --sample N` and `pytest --geo-sample N` run the same rows."""
    if settings.sample is None and settings.shard is None:  # no names needed beyond the limit: read only that far
        lines = list(itertools.islice(iter_dataset(path, settings.seed), settings.limit))
        return row_names(lines), lines
    lines = list(iter_dataset(path, settings.seed))
    names = row_names(lines)
    keep = chosen_indices(names, settings.limit, settings.sample, settings.seed, settings.shard)
    return [names[i] for i in keep], [lines[i] for i in keep]


def _run_rows(geo: GeoSession, rows: list[GeoRow], progress: RunProgress | None) -> Iterator[Outcome]:
    """Each row's outcome in order, as it is ready: the caller records it (its transcript
    goes to the spool) before the next, so finished rows' calls do not pile up in memory."""
    geo.schedule_many(rows)
    for row in rows:
        if progress is not None:
            progress.wait_for(row)
        yield geo.outcome(row)


def _project_settings(args: argparse.Namespace) -> tuple[Settings, str]:
    """The settings in the project's configuration, and where the dataset came from when
    --dataset did not name it (then set on `args`)."""
    project = find_config()
    found = ""
    if args.dataset is None:
        args.dataset, source = project_dataset(project)
        found = f" (from {source})"
    return _settings(args, project), found


def evaluate(args: argparse.Namespace) -> int:
    settings, found = _project_settings(args)
    args.reads = f"egeo: dataset {args.dataset}{found}; prompts {describe_prompts(settings.prompts_dir)}"
    if settings.sequential and len(settings.variants) < 2:
        build_parser().error("--sequential needs two or more --variant to compare")
    if settings.margin is not None and not settings.sequential:
        build_parser().error("--margin needs --sequential")
    return _with_budget(args, settings, _evaluate)


def _ready_cache(args: argparse.Namespace, settings: Settings) -> None:
    """pytest's cache directory, git-ignored as pytest makes it, when the answers go there."""
    if settings.use_cache and not settings.mock and _cache_dir(args) == DEFAULT_CACHE_DIR:
        make_ignored_pytest_cache(PYTEST_CACHE)


def _with_budget(args: argparse.Namespace, settings: Settings,
                 command: Callable[[argparse.Namespace, Settings], int]) -> int:
    """`command` under the run's budget (a ledger for its calls)."""
    evaluating = args.command in (EVALUATE, "score")
    check_budget(settings, ("--budget", "--budget-tokens"), "the ini option geo_prices in the project's "
                 "pytest configuration", roles=("ranker", "rewriter") if evaluating
                 else ("ranker", "rewriter", "optimizer"))
    check_query_blind(settings)
    if not BudgetLimits.of(settings).active:
        return command(args, settings)
    ledger = settings.budget_ledger = Ledger.create()
    try:
        return command(args, settings)
    finally:
        ledger.unlink(missing_ok=True)


def _evaluate(args: argparse.Namespace, settings: Settings) -> int:
    started, clock = time.time(), time.perf_counter()
    inputs = [(f"--dataset {args.dataset}", Path(args.dataset)),
              *prompt_inputs([Path(settings.prompts_dir), *settings.variants.values()])]
    check_output_paths([("--report", args.report), ("--html", args.html)], inputs, Path.cwd())
    if args.egeo_submission:
        check_judge_keys({j.name: j.model for j in settings.judges}, "--egeo-submission")
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
        geo.check_given([row for _, _, row in jobs])  # --rewrites: every row's, before any call
        _ready_cache(args, settings)
        print(args.reads, file=sys.stderr)  # the files the run reads, as pytest's header says them
        _run(geo, jobs, results, verbose=args.verbose)
    finally:
        geo.close()
    take_counts(results, geo)  # the plugin's records, aggregation and summary, so egeo and pytest cannot drift
    results.budget = budget_status(settings)
    for name, problem in problems:
        results.add(problem_record(problem, suite=dataset, split=dataset_split(dataset), nodeid=f"{dataset}::{name}"))
    # stderr: stdout stays the E-GEO harness's metrics JSON
    for line in [*run_notes(results, settings.mock, "pytest's ini option geo_prices"), *fact_lines(results),
                 *_partial(results, geo.stopped), *panel_lines(results), *flag_lines(results),
                 *comparison_lines(results), *red_team_lines(results)]:
        print(line, file=sys.stderr)
    print(json.dumps(_metrics(results, dataset, list(settings.variants)), indent=2, sort_keys=True))
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
            record = geo_record(row, outcome.record(), suite=suite, split=dataset_split(row.path), nodeid=nodeid)
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


def _write_reports(args: argparse.Namespace, results: Results, settings: Settings, started: float,
                   duration: float) -> None:
    if args.report or args.html:
        results.metadata = run_metadata(settings, started, duration)
    write_report_files(results, args.report, args.html, who="egeo", flags=("--report", "--html"))
    if args.egeo_submission:
        judges = {j.name: j.model for j in settings.judges}
        for folder in write_submission(results, Path(args.egeo_submission), judges, settings.models,
                                       settings.variant_models, dict(args.submission_meta)):
            print(f"E-GEO submission written to {folder}", file=sys.stderr)
    for line in written_lines(results, (("--report", "report", args.report), ("--html", "HTML report", args.html))):
        print(line, file=sys.stderr)
    for error in results.write_errors:
        print(error, file=sys.stderr)


Job = tuple[str, str, GeoRow]  # node id, suite, row


def _metrics(results: Results, dataset: str, variants: list[str]) -> Any:
    """stdout's JSON: the E-GEO metrics (per variant with variants); with --judge each
    also holds its `judges`, `panel` and `agreement` objects (report/judges.py)."""
    suites = results.geo_suite_results()

    def metrics(name: str, summary: Summary) -> dict[str, Any]:
        suite = suites.get(name)
        panel = suite.panel if suite is not None else None
        return {**summary.as_geo(), **(panel.as_json() if panel is not None else {})}

    if variants:
        return {v: metrics(f"{dataset}[{v}]", suites[f"{dataset}[{v}]"].summary)
                if f"{dataset}[{v}]" in suites else None for v in variants}
    return metrics(dataset, results.geo_overall())


def _monitor(settings: Settings, jobs: Sequence[Job]) -> Monitor:
    return monitor_for([planned_row(nodeid, suite, dataset_split(row.path), row.variant, len(row.candidates))
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
    from pytest_geo.optimize import OptimizeOptions, apply_refused, optimize_prompts

    if args.suites is None and (args.train is None or args.val is None):
        build_parser().error(f"{args.command} needs --train and --val, or --suites FILE")
    options = OptimizeOptions(args.train, args.val, args.iters, args.max_metric_calls, args.apply, suites=args.suites)
    results: list[dict[str, Any]] = []

    def run(args: argparse.Namespace, settings: Settings) -> int:
        _ready_cache(args, settings)
        results.append(optimize_prompts(settings, options))
        status = budget_status(settings)
        return 1 if status is not None and status.reached is not None else 0  # stopped short: the search was cut

    code = _with_budget(args, _settings(args, find_config()), run)
    print(json.dumps(results[0], indent=2, sort_keys=True))  # as the harness prints it
    return code or (1 if apply_refused(results[0]) else 0)


def plan(args: argparse.Namespace) -> int:
    """evaluate's rows through its pipeline with a client that sends nothing (engine/plan.py)."""
    from pytest_geo.engine.plan import plan_lines, plan_run

    settings = _project_settings(args)[0]
    check_query_blind(settings)
    jobs, problems = _jobs(args.dataset, settings)
    for _, problem in problems:
        print(problem, file=sys.stderr)
    rows = [row for _, _, row in jobs]
    result = plan_run(settings, rows)
    print("\n".join(plan_lines(result, settings)))
    return 0


def merge(args: argparse.Namespace) -> int:
    from pytest_geo.report.merge import MergeError, merge_reports

    check_output_paths([("--report", args.report), ("--html", args.html)],
                       [(f"the report {path}", Path(path)) for path in args.reports], Path.cwd())
    try:
        results = merge_reports(args.reports)
    except MergeError as exc:
        print(f"egeo: error: {exc}", file=sys.stderr)
        return 2
    for path in write_report_files(results, args.report, args.html, who="egeo", flags=("--report", "--html")):
        print(f"report written to {path}", file=sys.stderr)
    for error in results.write_errors:
        print(error, file=sys.stderr)
    print(json.dumps(results.geo_overall().as_geo(), indent=2, sort_keys=True))
    return 1 if results.write_errors else 0


def main(argv: Sequence[str] | None = None) -> int:
    from pytest_geo.optimize import OptimizeError

    args = build_parser().parse_args(argv)
    if args.command == "score" and not args.rewrites:
        build_parser().error("score needs --rewrites FILE (the rewrites to score)")
    commands = {"evaluate": evaluate, "score": evaluate, "optimize": optimize_prompts,
                "optimize-prompts": optimize_prompts, "plan": plan, "init": init, "merge": merge}
    try:
        if args.command in commands:
            return commands[args.command](args)
    except ClientSetupError as exc:
        print(f"egeo: error: {exc.naming(EGEO_FLAGS)}", file=sys.stderr)
        return 2
    except (DatasetError, PromptError, OptimizeError, SettingError, BudgetError, OutputPathError,
            ProjectConfigError, SubmissionError) as exc:
        print(f"egeo: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("egeo: interrupted", file=sys.stderr)
        return 130
    return 2


if __name__ == "__main__":
    sys.exit(main())
