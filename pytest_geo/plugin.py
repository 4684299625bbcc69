"""pytest-geo's hooks, in the order pytest calls them; the engine lives elsewhere."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Generator

import pytest

from pytest_geo.items import (
    REGISTERED_MARKERS,
    ConftestSuites,
    GeoDatasetFile,
    GeoRowItem,
    SuiteCollector,
    SuiteFile,
)
from pytest_geo.llm.cache import make_ignored_pytest_cache
from pytest_geo.llm.factory import ClientSetupError
from pytest_geo.prompts import PromptError
from pytest_geo.baseline import BaselineError, load_baseline
from pytest_geo.html_report import write_html_report
from pytest_geo.metadata import run_metadata
from pytest_geo.report import Results, build_report, junit_properties, terminal_lines, write_json_atomic
from pytest_geo.llm.usage import merge_usage, usage_lines
from pytest_geo.settings import DEFAULT_SEED, MOCK_ENV, ROLES, Settings, default_model, env_flag
from pytest_geo.options import (
    any_int,
    min_score,
    non_negative_int,
    positive_float,
    positive_int,
    split_mode,
    temperature,
)
from pytest_geo.suites import Suite, suites_in
from pytest_geo.xdist_lookahead import LookaheadControllerHooks, WorkerLookahead

if TYPE_CHECKING:
    from pytest_geo.session import GeoSession

SETTINGS = pytest.StashKey[Settings]()
SESSION = pytest.StashKey["GeoSession | None"]()
RESULTS = pytest.StashKey[Results]()
DATASETS = pytest.StashKey["set[Path]"]()
LOOKAHEAD = pytest.StashKey["WorkerLookahead | None"]()


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from pytest_geo import newhooks

    pluginmanager.add_hookspecs(newhooks)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("geo", "LLM prompt evaluation (pytest-geo)")
    group.addoption("--geo-dataset", action="append", default=[], metavar="PATH",
                    help="GEO JSONL dataset to evaluate; repeatable (ini: geo_datasets).")
    group.addoption("--geo-mock", action="store_true", default=False,
                    help=f"use the deterministic offline mock model for every role; no network, "
                         f"no key (env: {MOCK_ENV}=1).")
    group.addoption("--geo-prompts", metavar="DIR", default=None,
                    help="prompts directory in the E-GEO layout (ini: geo_prompts; default: <rootdir>/prompts).")
    group.addoption("--geo-seed", type=any_int, default=None, metavar="N",
                    help=f"seed for choosing a missing target_id (ini: geo_seed; default: {DEFAULT_SEED}).")
    group.addoption("--geo-report", metavar="PATH", default=None,
                    help="write the JSON report (aggregates and one record per row) to PATH.")
    for role in ROLES:
        group.addoption(f"--geo-{role}-model", metavar="MODEL", default=None,
                        help=f"model for the {role} role (ini: geo_{role}_model; env: "
                             f"{ {'ranker': 'RANKER_MODEL', 'rewriter': 'REWRITER_MODEL', 'optimizer': 'META_MODEL'}[role]}).")
    group.addoption("--geo-temperature", type=temperature, default=None, metavar="T",
                    help="sampling temperature for every call (ini: geo_temperature; default: 0).")
    group.addoption("--geo-base-url", metavar="URL", default=None,
                    help="OpenAI-compatible server (ini: geo_base_url; env: OPENAI_BASE_URL).")
    group.addoption("--geo-timeout", type=positive_float, default=None, metavar="SECONDS",
                    help="timeout for each model call (ini: geo_timeout; default: 60).")
    group.addoption("--geo-concurrency", type=positive_int, default=None, metavar="N",
                    help="most rows in flight at once; each makes at most 2 model calls at a time, so at "
                         "most 2N requests (ini: geo_concurrency; default: 16).")
    group.addoption("--geo-max-retries", type=non_negative_int, default=None, metavar="N",
                    help="retries of a failed model call (ini: geo_max_retries; default: 4).")
    group.addoption("--geo-split", type=split_mode, default=None, metavar="test|train|all",
                    help="suite rows to score: test (test_data, else data; default), train (data), "
                         "or all (both, reported separately) (ini: geo_split).")
    group.addoption("--geo-min-score", type=min_score, action="append", default=[], metavar="SUITE=VALUE",
                    help="fail the run when SUITE's score is below VALUE; repeatable; overrides the "
                         "suite's own threshold.")
    group.addoption("--geo-strict-facts", action="store_true", default=None,
                    help="a rewrite that adds facts (numbers, prices, model numbers, certifications) "
                         "not in the original scores 0.0 and fails its item (ini: geo_strict_facts).")
    group.addoption("--geo-cache-dir", metavar="DIR", default=None,
                    help="directory of the model-answer cache (ini: geo_cache_dir; "
                         "default: the pytest cache, <rootdir>/.pytest_cache/d/geo).")
    group.addoption("--geo-no-cache", action="store_true", default=False,
                    help="neither read nor write the model-answer cache.")
    group.addoption("--geo-repeats", type=positive_int, default=None, metavar="K",
                    help="run each GEO row K times, each with its own seeded candidate order, and "
                         "average them (ini: geo_repeats; default: 1).")
    group.addoption("--geo-baseline", metavar="PATH", default=None,
                    help="compare this run with an earlier --geo-report JSON file.")
    group.addoption("--geo-fail-on-regression", action="store_true", default=False,
                    help="with --geo-baseline: fail the run when a suite drops significantly "
                         "(paired sign test p < 0.05 and mean difference < 0).")
    group.addoption("--geo-html", metavar="PATH", default=None,
                    help="write a self-contained HTML report to PATH.")

    parser.addini("geo_suite_files", "glob patterns of YAML suite files", type="args", default=["*.geo.yaml"])
    parser.addini("geo_split", "suite rows to score: test, train or all", default="")
    parser.addini("geo_datasets", "GEO JSONL datasets, relative to the rootdir", type="paths", default=[])
    parser.addini("geo_prompts", "prompts directory, relative to the rootdir", default="")
    parser.addini("geo_seed", "seed for choosing a missing target_id", default="")
    for role in ROLES:
        parser.addini(f"geo_{role}_model", f"model for the {role} role", default="")
    parser.addini("geo_temperature", "sampling temperature", default="")
    parser.addini("geo_base_url", "OpenAI-compatible server URL", default="")
    parser.addini("geo_timeout", "timeout for each model call, in seconds", default="")
    parser.addini("geo_concurrency", "most rows in flight at once (at most 2N model requests)", default="")
    parser.addini("geo_max_retries", "retries of a failed model call", default="")
    parser.addini("geo_strict_facts", "fail rows whose rewrite adds facts", type="bool", default=False)
    parser.addini("geo_cache_dir", "directory of the model-answer cache, relative to the rootdir", default="")
    parser.addini("geo_repeats", "runs of each GEO row, each with its own candidate order", default="")


def _pick(config: pytest.Config, option: str, ini: str, convert: Callable[[str], Any]) -> Any:
    """The command line wins, then the ini file; ini values are validated like flags."""
    value = config.getoption(option)
    if value is not None:
        return value
    raw = str(config.getini(ini)).strip()
    if not raw:
        return None
    try:
        return convert(raw)
    except argparse.ArgumentTypeError as exc:
        raise pytest.UsageError(f"ini option {ini}: {exc}") from None


def _settings(config: pytest.Config) -> Settings:
    root = config.rootpath
    settings = Settings()
    settings.mock = bool(config.getoption("geo_mock")) or env_flag(MOCK_ENV)
    seed = _pick(config, "geo_seed", "geo_seed", any_int)
    settings.seed = DEFAULT_SEED if seed is None else seed
    prompts = config.getoption("geo_prompts")
    if prompts:
        settings.prompts_dir = Path(prompts).resolve()
    elif str(config.getini("geo_prompts")).strip():
        settings.prompts_dir = root / str(config.getini("geo_prompts")).strip()
    else:
        settings.prompts_dir = root / "prompts"
    for role in ROLES:
        settings.models[role] = _pick(config, f"geo_{role}_model", f"geo_{role}_model", str) or default_model(role)
    settings.temperature = _pick(config, "geo_temperature", "geo_temperature", temperature) or 0.0
    settings.base_url = _pick(config, "geo_base_url", "geo_base_url", str)
    settings.timeout = _pick(config, "geo_timeout", "geo_timeout", positive_float) or settings.timeout
    settings.concurrency = _pick(config, "geo_concurrency", "geo_concurrency", positive_int) or settings.concurrency
    settings.split = _pick(config, "geo_split", "geo_split", split_mode) or "test"
    retries = _pick(config, "geo_max_retries", "geo_max_retries", non_negative_int)
    settings.max_retries = settings.max_retries if retries is None else retries
    strict = config.getoption("geo_strict_facts")
    settings.strict_facts = bool(config.getini("geo_strict_facts") if strict is None else strict)
    settings.repeats = _pick(config, "geo_repeats", "geo_repeats", positive_int) or 1
    return settings


def _dataset_paths(config: pytest.Config) -> list[Path]:
    named = [(Path(p), "--geo-dataset") for p in config.getoption("geo_dataset")]
    named += [(Path(p), "ini option geo_datasets") for p in config.getini("geo_datasets")]
    paths = []
    for path, source in named:
        resolved = (config.invocation_params.dir / path).resolve() if not path.is_absolute() else path
        if not resolved.is_file():
            raise pytest.UsageError(f"{source}: dataset not found: {path}")
        paths.append(resolved)
    return paths


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "geo: a GEO rank-experiment row collected by pytest-geo")
    config.stash[SETTINGS] = _settings(config)
    config.stash[SESSION] = None
    config.stash[RESULTS] = Results()
    datasets = _dataset_paths(config)
    config.stash[DATASETS] = set(datasets)
    config.stash[REGISTERED_MARKERS] = set()
    config.stash[RESULTS].min_scores = dict(config.getoption("geo_min_score"))
    known = {Path(a.split("::")[0]).resolve() for a in config.args}
    config.args.extend(str(p) for p in datasets if p not in known)
    _load_baseline(config)
    config.pluginmanager.register(GeoCollector(config), "geo-collector")
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(GeoXdistHooks(config), "geo-xdist")
        config.pluginmanager.register(LookaheadControllerHooks(config), "geo-xdist-lookahead")


def _load_baseline(config: pytest.Config) -> None:
    path = config.getoption("geo_baseline")
    if config.getoption("geo_fail_on_regression") and not path:
        raise pytest.UsageError("--geo-fail-on-regression needs --geo-baseline PATH to compare with")
    if path and not _is_xdist_worker(config):
        results = config.stash[RESULTS]
        try:
            results.baseline = load_baseline(config.invocation_params.dir / path, display=path)
        except BaselineError as exc:
            raise pytest.UsageError(str(exc)) from None
        results.baseline_path = path


def settings_of(config: pytest.Config) -> Settings:
    return config.stash[SETTINGS]


def geo_session_of(config: pytest.Config) -> GeoSession:
    session = config.stash.get(SESSION, None)
    if session is None:
        session = config.stash[SESSION] = _start(config)
    return session


def _start(config: pytest.Config) -> GeoSession:
    # Imported here: the plugin loads in every pytest run, the engine (asyncio, the fact
    # checker's patterns, multiprocessing) only in runs that use a model.
    from pytest_geo.session import GeoSession

    settings = settings_of(config)
    _set_cache_location(config, settings)
    try:
        return GeoSession(settings, config.hook.pytest_geo_make_client(config=config, settings=settings))
    except (PromptError, ClientSetupError) as exc:
        raise pytest.UsageError(str(exc)) from None


def pytest_report_header(config: pytest.Config) -> str | None:
    if not config.stash[DATASETS]:
        return None
    settings = settings_of(config)
    model = "mock" if settings.mock else f"ranker={settings.models['ranker']} rewriter={settings.models['rewriter']}"
    return f"geo: model {model}, prompts {settings.prompts_dir}, seed {settings.seed}"


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    config = parent.config
    if file_path.suffix == ".jsonl":
        if file_path.resolve() in config.stash[DATASETS] or parent.session.isinitpath(file_path):
            return GeoDatasetFile.from_parent(parent, path=file_path)
        return None
    if any(file_path.match(pattern) for pattern in config.getini("geo_suite_files")):
        return SuiteFile.from_parent(parent, path=file_path)
    if file_path.name == "conftest.py" and suites_in(config.pluginmanager.get_plugin(str(file_path))):
        return ConftestSuites.from_parent(parent, path=file_path)
    return None


def pytest_pycollect_makeitem(collector: pytest.Collector, name: str, obj: object) -> pytest.Collector | None:
    if isinstance(obj, Suite):
        return SuiteCollector.from_parent(collector, name=obj.name, suite=obj)
    return None


def pytest_collection_finish(session: pytest.Session) -> None:
    """Build the engine before any row runs, so a missing key or a broken prompt stops
    the run at start with one message instead of failing every row."""
    if session.config.option.collectonly:
        return
    if any(isinstance(item, GeoRowItem) for item in session.items):
        try:
            geo_session_of(session.config).engine
        except PromptError as exc:
            raise pytest.UsageError(str(exc)) from None


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> Generator[None, object, object]:
    """Schedule every selected row up front: the model work overlaps while items report
    in pytest's order. An xdist worker gets items a few at a time, so it schedules rows
    as it goes instead (xdist_lookahead.py)."""
    geo = session.config.stash.get(SESSION, None)
    if geo is not None and not _is_xdist_worker(session.config):
        geo.schedule_many([(item.nodeid, item.row) for item in session.items if isinstance(item, GeoRowItem)])
    elif geo is not None:
        session.config.stash[LOOKAHEAD] = WorkerLookahead.for_worker(session, geo)
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, object, object]:
    lookahead = item.config.stash.get(LOOKAHEAD, None)
    if lookahead is not None:
        lookahead.before(item, nextitem)
    result = yield
    if item.session.shouldfail or item.session.shouldstop:
        geo = item.config.stash.get(SESSION, None)
        if geo is not None:
            geo.cancel_pending()
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    report = yield
    record = getattr(item, "geo_record", None)
    if call.when == "call" and record is not None:
        report.geo_record = record  # plain data: it travels with the report to an xdist controller
        item.user_properties.extend(junit_properties(record))  # on the teardown report, read by --junitxml
    return report


class GeoCollector:
    """Gathers row records from reports (local ones, or ones sent by xdist workers) and
    reports once, on the process that prints the summary."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.results = config.stash[RESULTS]
        self.started = time.time()
        self.clock = time.perf_counter()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        record = getattr(report, "geo_record", None)
        if record is not None and report.when == "call":
            self.results.add(record)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        geo = self.config.stash.get(SESSION, None)
        if geo is not None:
            geo.close()
            merge_usage(self.results.usage, geo.usage_table())  # the loop has stopped: safe to read
        if _is_xdist_worker(self.config):
            self.config.workeroutput["geo_usage"] = self.results.usage  # type: ignore[attr-defined]
            return
        self.results.metadata = run_metadata(settings_of(self.config), self.started, time.perf_counter() - self.clock)
        path, html_path = self.config.getoption("geo_report"), self.config.getoption("geo_html")
        write_html = bool(html_path) and not self.results.empty
        report = build_report(self.results) if path or write_html else None
        if path:
            write_json_atomic(Path(path), report)
        if write_html:
            write_html_report(Path(html_path), report)
        failing = self.results.below_threshold() or (
            self.config.getoption("geo_fail_on_regression") and self.results.regressions())
        if failing and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_terminal_summary(self, terminalreporter: Any) -> Generator[None, None, None]:
        """Outermost, so the `Evals:` block comes after pytest's own short summary."""
        yield
        if self.results.empty:
            return
        terminalreporter.write_sep("=", "pytest-geo evaluation")
        path = self.config.getoption("geo_report")
        if path:
            terminalreporter.write_line(f"report written to {path}")
        if self.results.usage:
            terminalreporter.write_line("model usage:")
            for line in usage_lines(self.results.usage):
                terminalreporter.write_line(f"  {line}")
        if self.config.getoption("geo_html"):
            terminalreporter.write_line(f"HTML report written to {self.config.getoption('geo_html')}")
        for line in terminal_lines(self.results, show_split=settings_of(self.config).split == "all"):
            terminalreporter.write_line(line)


def _is_xdist_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


class GeoXdistHooks:
    """Only registered with xdist: workers' model usage reaches the controller."""

    def __init__(self, config: pytest.Config) -> None:
        self.results = config.stash[RESULTS]

    def pytest_testnodedown(self, node: Any, error: object) -> None:
        usage = getattr(node, "workeroutput", {}).get("geo_usage")
        if isinstance(usage, dict):
            merge_usage(self.results.usage, usage)


def _set_cache_location(config: pytest.Config, settings: Settings) -> None:
    """--geo-no-cache, else --geo-cache-dir, else ini geo_cache_dir, else the pytest cache
    (created only now, when a model is about to be used). With the cacheprovider disabled
    (-p no:cacheprovider) the same place is used: <rootdir>/.pytest_cache/d/geo."""
    if config.getoption("geo_no_cache"):
        settings.use_cache = False
        return
    named = config.getoption("geo_cache_dir")
    ini = str(config.getini("geo_cache_dir")).strip()
    if named:
        settings.cache_dir = (config.invocation_params.dir / named).resolve()
    elif ini:
        settings.cache_dir = (config.rootpath / ini).resolve()
    elif getattr(config, "cache", None) is not None:
        settings.cache_dir = config.cache.mkdir("geo")
    else:
        settings.cache_dir = config.rootpath / ".pytest_cache" / "d" / "geo"
        if not settings.mock:
            make_ignored_pytest_cache(config.rootpath / ".pytest_cache")
