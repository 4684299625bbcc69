"""pytest-geo's hooks, in the order pytest calls them; the work lives below them."""

from __future__ import annotations

import os
import time
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from pytest_geo.data.dataset import DATASET_SUFFIXES, is_dataset_path
from pytest_geo.llm.profiles import merge_lessons
from pytest_geo.llm.usage import merge_usage
from pytest_geo.pytest_layer.budget import pass_ledger, start_budget
from pytest_geo.pytest_layer.collect import (
    ConftestSuites,
    GeoDatasetFile,
    SuiteFile,
    split_note,
    suite_collector,
)
from pytest_geo.pytest_layer.invocation import datasets_as_args, restore_project_setup
from pytest_geo.pytest_layer.items import GeoItem, GeoRowItem
from pytest_geo.pytest_layer.lookahead import (
    LookaheadControllerHooks,
    RunLookahead,
    WorkerLookahead,
    collection_failed,
)
from pytest_geo.pytest_layer.markers import register_suite_markers
from pytest_geo.pytest_layer.min_scores import resolve_min_scores, suite_of_nodeid
from pytest_geo.pytest_layer.options import (
    add_options,
    check_report_paths,
    dataset_paths,
    max_error_rate,
    remembered_changes,
    settings_from_config,
)
from pytest_geo.pytest_layer.selection import deselect_rows
from pytest_geo.pytest_layer.sequential import (
    ITEMS,
    SequentialXdistHooks,
    check_sequential,
    sequential_run,
)
from pytest_geo.pytest_layer.state import (
    DATASETS,
    DECLARED_SUITES,
    HEADER_SHOWN,
    LOOKAHEAD,
    MAX_ERROR_RATE,
    PROGRESS,
    REGISTERED_MARKERS,
    RESULTS,
    SESSION,
    SETTINGS,
    geo_session_of,
    is_xdist_worker,
    results_of,
    running_session,
    settings_of,
    stopped_at_start,
)
from pytest_geo.pytest_layer.summary import report_gates, terminal_summary, write_reports
from pytest_geo.report.baseline import BaselineError, differences, load_baseline
from pytest_geo.report.concurrency import merge_stats
from pytest_geo.report.finish import take_counts
from pytest_geo.report.junit import junit_properties, pass_junit, writes_junit
from pytest_geo.report.metadata import base_url_host, run_identity
from pytest_geo.report.progress import terminal_progress
from pytest_geo.report.results import Results
from pytest_geo.report.transcripts import TranscriptSpool
from pytest_geo.settings import Settings, describe_prompts
from pytest_geo.suites.suite import Suite, suites_in


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from pytest_geo import newhooks

    pluginmanager.add_hookspecs(newhooks)


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]) -> None:
    """Before conftests load and the command line is parsed for good: keep the project's
    rootdir when `--geo-dataset PATH` moved it, and make `--geo-dataset` without positional
    arguments the run's arguments (invocation.py says why and how)."""
    restore_project_setup(early_config, parser, args)
    datasets_as_args(early_config, args)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "geo: a GEO rank-experiment row collected by pytest-geo")
    config.stash[SETTINGS] = settings_from_config(config)
    _check_variants(config)
    start_budget(config)
    config.stash[SESSION] = None
    worker = is_xdist_worker(config)
    reports = not worker and bool(config.getoption("geo_report") or config.getoption("geo_html"))
    config.stash[RESULTS] = Results(min_scores=dict(config.getoption("geo_min_score")),
                                    transcripts=TranscriptSpool(keep=reports, copy=worker))
    config.stash[REGISTERED_MARKERS] = set()
    config.stash[DECLARED_SUITES] = {}
    config.stash[MAX_ERROR_RATE] = max_error_rate(config)
    datasets = dataset_paths(config)
    config.stash[DATASETS] = set(datasets)
    known = {Path(a.split("::")[0]).resolve() for a in config.args}
    config.args.extend(str(p) for p in datasets if p not in known)
    _load_baseline(config)
    if config.getoption("geo_plan") and getattr(config.option, "numprocesses", None):
        raise pytest.UsageError("--geo-plan plans the run in one process: drop -n (xdist)")
    check_sequential(config)
    if not is_xdist_worker(config):
        check_report_paths(config)
    if config.option.markers:  # `pytest --markers` collects nothing: list the suites found without it
        register_suite_markers(config)
    config.pluginmanager.register(GeoCollector(config), "geo-collector")
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(GeoXdistHooks(config), "geo-xdist")
        config.pluginmanager.register(LookaheadControllerHooks(config), "geo-xdist-lookahead")
        run = sequential_run(config)
        if run is not None and not is_xdist_worker(config):
            config.pluginmanager.register(SequentialXdistHooks(run), "geo-xdist-sequential")


def _check_variants(config: pytest.Config) -> None:
    """A broken variant template, or a rewriter prompt that sees the query in a query-blind
    run, stops the run at start, naming its file (the rows of a run are never half scored
    with a strategy that cannot run)."""
    settings = settings_of(config)
    if not settings.variants and not settings.query_blind:
        return
    from pytest_geo.engine.query_blind import check_query_blind
    from pytest_geo.engine.variants import load_variants
    from pytest_geo.templates import PromptError

    try:
        load_variants(settings.variants)
        check_query_blind(settings)
    except PromptError as exc:
        raise pytest.UsageError(str(exc)) from None


def _load_baseline(config: pytest.Config) -> None:
    path = config.getoption("geo_baseline")
    if config.getoption("geo_fail_on_regression") and not path:
        raise pytest.UsageError("--geo-fail-on-regression needs --geo-baseline PATH to compare with")
    if path and not is_xdist_worker(config):
        results = results_of(config)
        try:
            results.baseline = load_baseline(config.invocation_params.dir / path, display=path)
        except BaselineError as exc:
            raise pytest.UsageError(str(exc)) from None
        results.baseline_path = path
        results.baseline_differences, refusing = differences(results.baseline, run_identity(settings_of(config)))
        if refusing and not config.getoption("geo_baseline_force"):
            raise pytest.UsageError(
                f"--geo-baseline: {path} was made with another model ({'; '.join(refusing)}); its scores do not "
                "compare with this run's (--geo-baseline-force compares anyway)"
            )


def pytest_report_header(config: pytest.Config) -> str | None:
    """Which model, server, prompts and seed GEO rows use: for named datasets and for
    .jsonl paths given as arguments; for suites it comes once they are collected."""
    if not config.stash[DATASETS] and not any(is_dataset_path(a.split("::")[0]) for a in config.args):
        return None
    config.stash[HEADER_SHOWN] = True
    return geo_header(config)


def geo_header(config: pytest.Config) -> str:
    from pytest_geo.local_server import placeholder_key_host

    settings = settings_of(config)
    if settings.mock:
        model = "model mock"
    else:
        host = base_url_host(settings.base_url or os.environ.get("OPENAI_BASE_URL")) or "api.openai.com"
        rankers = " ".join(f"{j.name}={j.model}" for j in settings.judges)  # judges rank in the ranker's stead
        ranker = f"judges {rankers}" if rankers else f"ranker={settings.models['ranker']}"
        model = f"model {ranker} rewriter={settings.models['rewriter']}, server {host}"
        model += endpoints_named(settings)
    header = f"geo: {model}, prompts {describe_prompts(settings.prompts_dir)}, seed {settings.seed}"
    header += split_note(config)
    local = placeholder_key_host(settings)
    if local is not None:
        header += f"; no OPENAI_API_KEY: a placeholder key for the local server {local}"
    changes = remembered_changes(config, settings)
    if changes:  # an earlier run learned them from this server (llm/lessons.py)
        header += "; requests as the server accepts them: " + "; ".join(changes)
    return header


def endpoints_named(settings: Settings) -> str:
    """`, endpoint NAME (host)` for each endpoint a model of the run names: the ranker's
    (each judge's, with judges), the rewriter's and each variant's rewriter's (a user paying several
    providers sees each one the run calls; never a key)."""
    from pytest_geo.llm.endpoints import EndpointError, describe, resolve
    from pytest_geo.llm.providers import ProviderError

    rankers = [judge.model for judge in settings.judges] or [settings.models["ranker"]]
    models = [*rankers, settings.models["rewriter"], *settings.variant_models.values()]
    named = []
    for model in models:
        try:
            endpoint = resolve(model, settings.endpoints)[0]
        except (EndpointError, ProviderError):  # said when the run starts
            continue
        if endpoint is not None and describe(endpoint) not in named:
            named.append(describe(endpoint))
    return "".join(f", {name}" for name in named)


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    config = parent.config
    if file_path.suffix in DATASET_SUFFIXES:  # a dataset is collected only where it is named
        named = file_path.resolve() in config.stash[DATASETS] or parent.session.isinitpath(file_path)
        return GeoDatasetFile.for_path(parent, file_path) if named else None
    if any(file_path.match(pattern) for pattern in config.getini("geo_suite_files")):
        return SuiteFile.from_parent(parent, path=file_path)
    if file_path.name == "conftest.py" and suites_in(config.pluginmanager.get_plugin(str(file_path))):
        return ConftestSuites.from_parent(parent, path=file_path)
    return None


def pytest_pycollect_makeitem(collector: pytest.Collector, name: str, obj: object) -> pytest.Collector | None:
    if isinstance(obj, Suite):
        return suite_collector(collector, obj)
    return None


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """After -k, -m and --deselect: --geo-limit and --geo-sample pick among what is left."""
    deselect_rows(config, items, settings_of(config))
    run = sequential_run(config)
    if run is not None:
        run.order(items)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Build the engine before any row runs, so a missing key or a broken prompt stops
    the run at start with one message instead of failing every row."""
    if not is_xdist_worker(session.config):
        rows = [item for item in session.items if isinstance(item, GeoItem)]
        results_of(session.config).selected = {item.nodeid for item in rows}
        _check_min_scores(session.config, {item.suite_name for item in rows})
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if rows and reporter is not None and reporter.showheader and not reporter.no_header \
                and not session.config.stash.get(HEADER_SHOWN, False):
            reporter.write_line(geo_header(session.config))  # suites: known only now
    if session.config.option.collectonly:
        return
    run = sequential_run(session.config)
    if run is not None:
        session.config.stash[ITEMS] = session.items
        run.collected(session.items)
    plan = session.config.getoption("geo_plan")
    if plan or any(isinstance(item, GeoRowItem) for item in session.items):
        from pytest_geo.data.dataset import DatasetError
        from pytest_geo.templates import PromptError

        try:
            if plan:
                print_plan(session)
            geo = geo_session_of(session.config)
            geo.engine  # noqa: B018 (built for its errors)
            geo.variant_prompts  # noqa: B018 (a variant changing the ranker's prompts is an error)
            geo.check_given(item.read_row() for item in session.items if isinstance(item, GeoRowItem))
        except (PromptError, DatasetError) as exc:
            stopped_at_start(session.config)
            raise pytest.UsageError(str(exc)) from None


def print_plan(session: pytest.Session) -> None:
    """--geo-plan: the selected rows' plan (engine/plan.py), then the run ends: no model is
    called. The plan's own checks (the prompts, the given rewrites) raise as the run's do."""
    from pytest_geo.engine.plan import plan_lines, plan_run

    settings = settings_of(session.config)
    rows = [item.read_row() for item in session.items if isinstance(item, GeoRowItem)]
    lines = plan_lines(plan_run(settings, rows), settings)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    for line in lines:
        if reporter is not None:
            reporter.write_line(line)
    pytest.exit("geo: plan printed (--geo-plan); no model was called", returncode=0)


def _check_min_scores(config: pytest.Config, suites: set[str]) -> None:
    results = results_of(config)
    judges = [j.name for j in settings_of(config).judges]
    results.min_scores = resolve_min_scores(config, dict(config.getoption("geo_min_score")), suites, judges)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> Generator[None, object, object]:
    """Schedule the selected rows ahead of the items: the model work overlaps while items
    report in pytest's order (lookahead.py: a window ahead, topped up as items run; an
    xdist worker, which gets items a few at a time, from its queue). Nothing is
    scheduled once collection has failed."""
    geo = running_session(session.config)
    failed = collection_failed(session)
    if failed is not None:
        session.config.pluginmanager.register(RowsNotRun(failed), "geo-collection-failed")
    elif geo is not None and not is_xdist_worker(session.config):
        rows = [item for item in session.items if isinstance(item, GeoRowItem)]
        run = sequential_run(session.config)
        # Under --geo-sequential a comparison's rows are scheduled a round at a time (before each item).
        session.config.stash[LOOKAHEAD] = RunLookahead(
            geo, [item for item in rows if run is None or not run.in_comparison(item)])
        session.config.stash[PROGRESS] = terminal_progress(session.config, geo, len(rows))
    elif geo is not None:
        lookahead = session.config.stash[LOOKAHEAD] = WorkerLookahead.for_worker(session, geo)
        if (run := sequential_run(session.config)) is not None:
            lookahead.unwanted = lambda item: run.not_needed(item) is not None
    return (yield)


class RowsNotRun:
    """Registered only once collection has failed. Under xdist a worker runs its items even
    after a collection error: rows do not run then (pytest alone runs nothing), so a run
    that has failed makes no model call. (Not a hook of every run: it would cost every
    item of every run a call.)"""

    def __init__(self, failed: str) -> None:
        self.failed = failed

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        if isinstance(item, GeoItem):
            pytest.skip(f"not run: {self.failed} (--continue-on-collection-errors runs the rows)")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, object, object]:
    run = sequential_run(item.config)
    if run is not None and isinstance(item, GeoRowItem):
        run.before(item)
    lookahead = item.config.stash.get(LOOKAHEAD, None)
    if lookahead is not None:
        lookahead.before(item, nextitem)
    progress = item.config.stash.get(PROGRESS, None)
    if progress is not None and isinstance(item, GeoRowItem):
        progress.wait_for(item.row)  # before the item's output starts: the status line shows meanwhile
    result = yield
    geo = running_session(item.config)
    if geo is not None and isinstance(item, GeoRowItem) and (row := item.row_not_run) is not None:
        geo.cancel(row)  # scheduled, never taken: not needed, and its place in the runner's window is freed
        item.forget_row()
    if geo is not None and (item.session.shouldfail or item.session.shouldstop):
        geo.cancel_pending()
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    report = yield
    if call.when != "call":  # the record and the stop travel on the call's report only
        return report
    stopped = getattr(item, "geo_stopped", None)
    if stopped is not None:
        report.geo_stopped = stopped  # plain data, like the record: it reaches an xdist controller
    record = getattr(item, "geo_record", None)
    if record is not None:
        report.geo_record = record  # plain data: it travels with the report to an xdist controller
        # A GEO row ran ahead of its item, which only collected its outcome: its duration
        # (JUnit's time, --durations) is the row's own wall time.
        report.duration = max(report.duration, record.get("seconds", 0.0))
        if writes_junit(item.config):  # on the teardown report, read by --junitxml (a worker's: by its controller's)
            item.user_properties.extend(junit_properties(record))
        item.geo_record = None  # type: ignore[attr-defined]  # the report has it; items live to the end of the session
    return report


class GeoCollector:
    """Gathers row records from reports (local ones, or ones sent by xdist workers) and
    reports once, on the process that prints the summary."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.results = results_of(config)
        self.started = time.time()
        self.clock = time.perf_counter()
        self.finished = False

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "call":  # the record and the stop travel on the call's report only
            return
        record = getattr(report, "geo_record", None)
        if record is not None:
            self.results.add(record)
            run = sequential_run(self.config)
            if run is not None:
                run.add(record)
        stopped = getattr(report, "geo_stopped", None)
        if isinstance(stopped, str) and self.results.stopped is None:
            self.results.stopped = stopped

    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_runtestloop(self, session: pytest.Session) -> Generator[None, object, object]:
        """Innermost, so the gates report right after the last row, before the terminal
        writes its final progress; only after a loop that ran to its end (an interrupted
        run is partial: its scores prove nothing), on the process that saw every row.
        The reports are written here too, so one that cannot be written is a failed test
        wherever the gates are one (the final line, `-rf`, the JUnit XML)."""
        result = yield
        if not is_xdist_worker(self.config) and not self.config.option.collectonly:
            report_gates(session)
            self.finish(session)  # a report that cannot be written fails here, before --junitxml writes
        return result

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """The reports of a run cut short (interrupted, collect-only) are written here."""
        self.finish(session)

    def finish(self, session: pytest.Session) -> None:
        """Once: close the engine, gather what it counted, send it on (a worker) or write
        the reports (the process that prints)."""
        if self.finished:
            return
        self.finished = True
        geo = running_session(self.config)
        if geo is not None:
            geo.close()
            take_counts(self.results, geo)  # the loop has stopped: safe to read
        run = sequential_run(self.config)
        if run is not None:
            run.close()
        if is_xdist_worker(self.config):
            self.config.workeroutput["geo_usage"] = self.results.usage  # type: ignore[attr-defined]
            self.config.workeroutput["geo_endpoint_usage"] = self.results.endpoint_usage  # type: ignore[attr-defined]
            self.config.workeroutput["geo_request_changes"] = self.results.request_changes  # type: ignore[attr-defined]
            self.config.workeroutput["geo_concurrency"] = self.results.concurrency  # type: ignore[attr-defined]
            return
        write_reports(session, self.results, self.started, time.perf_counter() - self.clock)

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_terminal_summary(self, terminalreporter: Any) -> Generator[None, None, None]:
        """Outermost, so the `Evals:` block comes after pytest's own short summary."""
        yield
        if not self.config.getoption("geo_plan"):  # a plan ran nothing: no evaluation to sum up
            terminal_summary(self.config, self.results, terminalreporter)


class GeoXdistHooks:
    """Only registered with xdist: workers' model usage and request changes reach the controller."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.results = results_of(config)
        self.checked = False

    def pytest_configure_node(self, node: Any) -> None:
        """Every worker spends from the controller's one budget ledger, and learns whether
        the controller writes a JUnit XML file (its rows' properties travel on their reports)."""
        pass_ledger(self.config, node.workerinput)
        pass_junit(self.config, node.workerinput)

    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        """The controller collects nothing: the first worker's ids name the suites."""
        if not self.checked:
            self.checked = True
            rows = {nodeid: suite for nodeid in ids if (suite := suite_of_nodeid(nodeid)) is not None}
            self.results.selected = set(rows)
            _check_min_scores(self.config, set(rows.values()))

    def pytest_testnodedown(self, node: Any, error: object) -> None:
        output = getattr(node, "workeroutput", {})
        usage = output.get("geo_usage")
        if isinstance(usage, dict):
            merge_usage(self.results.usage, usage)
        if isinstance(by_endpoint := output.get("geo_endpoint_usage"), dict):
            merge_usage(self.results.endpoint_usage, by_endpoint)
        merge_lessons(self.results.request_changes, output.get("geo_request_changes"))
        concurrency = output.get("geo_concurrency")
        if isinstance(concurrency, dict):
            self.results.concurrency = merge_stats(self.results.concurrency, concurrency)
