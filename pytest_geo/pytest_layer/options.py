"""The `--geo-*` flags and their ini twins, and turning them into the run's Settings."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from pytest_geo.data.egeo_data import is_egeo_data
from pytest_geo.data.files import IS_DIRECTORY, unwritable
from pytest_geo.judge import Judge, judges_from
from pytest_geo.llm.endpoints import Endpoint
from pytest_geo.option_spec import BY_KEY, OPTIONS, Option, add_pytest_options
from pytest_geo.options import judge, variant, variant_model
from pytest_geo.price import Price
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

T = TypeVar("T")


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("geo", f"LLM prompt evaluation (pytest-geo; {connection_help('--geo-')})")
    add_pytest_options(parser, group)


def _pick(config: pytest.Config, option: Option) -> Any:
    """The command line wins, then the ini file; ini values are validated like flags."""
    value = config.getoption(option.dest)
    if value is not None or option.ini is None:
        return value
    if option.ini_type == "bool":
        return bool(config.getini(option.ini))
    raw = str(config.getini(option.ini)).strip()
    if not raw:
        return None
    try:
        return (option.type or str)(raw)
    except argparse.ArgumentTypeError as exc:
        raise pytest.UsageError(f"ini option {option.ini}: {exc}") from None


def max_error_rate(config: pytest.Config) -> float | None:
    """The error-rate gate's limit; None: only a suite whose every row errored fails."""
    limit: float | None = _pick(config, BY_KEY["max_error_rate"])
    return limit


def settings_from_config(config: pytest.Config) -> Settings:
    given: dict[str, Any] = {option.key: _pick(config, option) for option in OPTIONS if option.setting}
    given["prompts_dir"] = prompts_dir(config)
    given["prices"] = _prices(config)
    given["endpoints"] = _endpoints(config)
    given["variants"], given["variant_models"] = variant_paths(config)
    given["judges"] = judge_list(config)
    given["egeo_data"] = _names_egeo_data(config)
    given["query_blind"] = given["query_blind"] or given["egeo_data"]
    rewrites = config.getoption("geo_rewrites")
    given["rewrites"] = config.invocation_params.dir / rewrites if rewrites else None
    models = {role: _pick(config, BY_KEY[f"{role}_model"]) for role in ROLES}
    try:
        return build_settings(given, models)
    except SettingError as exc:
        raise pytest.UsageError(str(exc)) from None


def _names_egeo_data(config: pytest.Config) -> bool:
    """Whether the run names an E-GEO data file, whose rules make it query-blind (and
    whose ranker, with the packaged prompts, is E-GEO's)."""
    named = [*config.getoption("geo_dataset"), *map(str, config.getini("geo_datasets")), *config.args]
    return any(is_egeo_data(name.split("::")[0]) for name in named)


def _prices(config: pytest.Config) -> dict[str, Price]:
    from pytest_geo.llm.prices import PriceError, parse_price_lines

    try:
        return parse_price_lines(config.getini("geo_prices"))
    except PriceError as exc:
        raise pytest.UsageError(f"ini option geo_prices: {exc}") from None


def _endpoints(config: pytest.Config) -> dict[str, Endpoint]:
    from pytest_geo.llm.endpoints import EndpointError, parse_endpoint_lines

    try:
        return parse_endpoint_lines(config.getini("geo_endpoints"))
    except EndpointError as exc:
        raise pytest.UsageError(f"{config.inipath or 'ini'}: ini option geo_endpoints: {exc}") from None


def _flags_else_ini(config: pytest.Config, dest: str, ini: str,
                    parse: Callable[[str], T]) -> tuple[list[T], Path, str]:
    """A repeatable flag's values (paths in them relative to the invocation directory),
    else the ini option's lines parsed alike (relative to the rootdir), with the base and
    the name to put in messages; a line that does not parse is a usage error naming it."""
    named: list[T] = config.getoption(dest)
    if named:
        return named, config.invocation_params.dir, "--" + dest.replace("_", "-")
    source = f"ini option {ini}"
    try:
        return [parse(line) for line in config.getini(ini) if line.strip()], config.rootpath, source
    except argparse.ArgumentTypeError as exc:
        raise pytest.UsageError(f"{source}: {exc}") from None


def judge_list(config: pytest.Config) -> list[Judge]:
    """--geo-judge (system files relative to the invocation directory), else the ini's
    geo_judges lines (relative to the rootdir); a name given twice is an error."""
    named, base, source = _flags_else_ini(config, "geo_judge", "geo_judges", judge)
    try:
        return judges_from(named, source, base)
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None


def variant_paths(config: pytest.Config) -> tuple[dict[str, Path], dict[str, str]]:
    """--geo-variant (relative to the invocation directory), else the ini's geo_variants
    lines (relative to the rootdir), in the order given; a name given twice is an error.
    Only the shape is checked here: the templates are read at start (engine/variants.py).
    Also each variant's rewriter model, from `PATH@MODEL`."""
    named, base, source = _flags_else_ini(config, "geo_variant", "geo_variants", variant)
    variants: dict[str, Path] = {}
    models: dict[str, str] = {}
    for name, given in named:
        if name in variants:
            raise pytest.UsageError(f"{source}: variant {name!r} is given twice")
        path, model = variant_model(given)
        variants[name] = base / path
        if model is not None:
            models[name] = model
    return variants, models


def prompts_dir(config: pytest.Config) -> Path:
    return find_prompts_dir(
        config.getoption("geo_prompts"),
        str(config.getini("geo_prompts")).strip() or None,
        config.rootpath,
        config.invocation_params.dir,
    )


def dataset_paths(config: pytest.Config) -> list[Path]:
    named = [(Path(p), "--geo-dataset") for p in config.getoption("geo_dataset")]
    named += [(Path(p), "ini option geo_datasets") for p in config.getini("geo_datasets")]
    paths = []
    for path, source in named:
        resolved = (config.invocation_params.dir / path).resolve() if not path.is_absolute() else path
        if not resolved.is_file():
            problem = "not a regular file" if resolved.exists() else "not found"
            raise pytest.UsageError(f"{source}: dataset {problem}: {path}")
        paths.append(resolved)
    return paths


def check_report_paths(config: pytest.Config) -> None:
    """--geo-report and --geo-html must name a file that can be written: a directory or a
    place without write access is a usage error now, not a traceback after the run."""
    for option in ("geo_report", "geo_html"):
        value = config.getoption(option)
        if not value:
            continue
        flag = "--" + option.replace("_", "-")
        problem = unwritable(config.invocation_params.dir / value)
        if problem == IS_DIRECTORY:
            raise pytest.UsageError(f"{flag}: {value} is a directory; name a file")
        if problem:
            raise pytest.UsageError(f"{flag}: cannot write {value}: {problem}")
    from pytest_geo.report.output import OutputPathError, check_output_paths

    try:
        reports = [("--geo-report", config.getoption("geo_report")), ("--geo-html", config.getoption("geo_html"))]
        check_output_paths(reports, run_inputs(config), config.invocation_params.dir,
                           others=[("--junitxml", config.option.xmlpath)])
    except OutputPathError as exc:
        raise pytest.UsageError(str(exc)) from None
    _check_submission_keys(config)


def _check_submission_keys(config: pytest.Config) -> None:
    if not config.getoption("geo_egeo_submission"):
        return
    from pytest_geo.pytest_layer.state import settings_of
    from pytest_geo.report.egeo_submission import SubmissionError, check_judge_keys

    try:
        check_judge_keys({j.name: j.model for j in settings_of(config).judges}, "--geo-egeo-submission")
    except SubmissionError as exc:
        raise pytest.UsageError(str(exc)) from None


def run_inputs(config: pytest.Config) -> list[tuple[str, Path]]:
    """The files a run reads that a report path must not name: the paths given (datasets,
    test files), the baseline, the prompt files and the variants' templates."""
    here = config.invocation_params.dir
    found = [(f"the path {arg}", here / arg.split("::")[0]) for arg in config.args]
    baseline = config.getoption("geo_baseline")
    if baseline:
        found.append((f"--geo-baseline {baseline}", here / baseline))
    from pytest_geo.pytest_layer.state import settings_of
    from pytest_geo.report.output import prompt_inputs

    settings = settings_of(config)
    found += prompt_inputs([Path(settings.prompts_dir), *settings.variants.values()])
    return [(what, path) for what, path in found if path.is_file()]


def answer_cache_dir(config: pytest.Config) -> Path | None:
    """Where set_cache_location puts the answer cache, found without creating anything."""
    if config.getoption("geo_no_cache"):
        return None
    named = config.getoption("geo_cache_dir")
    ini = str(config.getini("geo_cache_dir")).strip()
    if named:
        return Path(config.invocation_params.dir / named).resolve()
    if ini:
        return (config.rootpath / ini).resolve()
    try:
        pytest_cache = Path(str(config.getini("cache_dir")))  # pytest's own, when the cacheprovider runs
    except ValueError:
        pytest_cache = PYTEST_CACHE
    return config.rootpath / pytest_cache / "d" / "geo"


def remembered_changes(config: pytest.Config, settings: Settings) -> list[str]:
    """Request changes an earlier run learned for this run's server and models
    (llm/lessons.py), one line each, for the `geo:` header."""
    from pytest_geo.llm.lessons import load_lessons
    from pytest_geo.settings import server_url

    cache_dir = answer_cache_dir(config)
    if settings.mock or cache_dir is None:
        return []
    models = set(settings.models.values())
    return [lesson.text() for lesson in load_lessons(cache_dir, server_url(settings.base_url))
            if lesson.model in models]


def set_cache_location(config: pytest.Config, settings: Settings) -> None:
    """--geo-no-cache, else --geo-cache-dir, else ini geo_cache_dir, else the pytest cache
    (created only now, when a model is about to be used). With the cacheprovider disabled
    (-p no:cacheprovider) the same place is used: <rootdir>/.pytest_cache/d/geo."""
    from pytest_geo.llm.cache import make_ignored_pytest_cache

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
        settings.cache_dir = config.rootpath / DEFAULT_CACHE_DIR
        if not settings.mock:
            make_ignored_pytest_cache(config.rootpath / PYTEST_CACHE)
