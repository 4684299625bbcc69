"""The `--geo-*` flags and their ini twins, and turning them into the run's Settings."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pytest_geo.llm.prices import Price
from pytest_geo.options import (
    alpha,
    any_int,
    concurrency,
    dollars,
    min_score,
    non_negative_int,
    positive_float,
    positive_int,
    progress_mode,
    reasoning_effort,
    share,
    split_mode,
    structured_mode,
    temperature,
    variant,
)
from pytest_geo.settings import (
    DEFAULT_ALPHA,
    DEFAULT_CACHE_DIR,
    DEFAULT_CONCURRENCY,
    DEFAULT_MAX_CONCURRENCY,
    DEFAULT_MAX_OUTPUT_TOKENS,
    DEFAULT_MAX_RETRIES,
    DEFAULT_MODELS,
    DEFAULT_SEED,
    DEFAULT_TIMEOUT,
    LOCAL_START_CONCURRENCY,
    LOCAL_TIMEOUT,
    MOCK_ENV,
    MODEL_ENV,
    PYTEST_CACHE,
    ROLES,
    TIMEOUT_ENV,
    SettingError,
    Settings,
    build_settings,
    connection_help,
    find_prompts_dir,
)

# Settings field -> (option dest, ini name, parser): the command line wins, then the ini file.
VALUED: dict[str, tuple[str, str, Callable[[str], Any]]] = {
    "seed": ("geo_seed", "geo_seed", any_int),
    "temperature": ("geo_temperature", "geo_temperature", temperature),
    "reasoning_effort": ("geo_reasoning_effort", "geo_reasoning_effort", reasoning_effort),
    "structured": ("geo_structured", "geo_structured", structured_mode),
    "base_url": ("geo_base_url", "geo_base_url", str),
    "timeout": ("geo_timeout", "geo_timeout", positive_float),
    "concurrency": ("geo_concurrency", "geo_concurrency", concurrency),
    "max_concurrency": ("geo_max_concurrency", "geo_max_concurrency", positive_int),
    "max_retries": ("geo_max_retries", "geo_max_retries", non_negative_int),
    "max_output_tokens": ("geo_max_output_tokens", "geo_max_output_tokens", positive_int),
    "split": ("geo_split", "geo_split", split_mode),
    "repeats": ("geo_repeats", "geo_repeats", positive_int),
    "limit": ("geo_limit", "geo_limit", positive_int),
    "sample": ("geo_sample", "geo_sample", positive_int),
    "progress": ("geo_progress", "geo_progress", progress_mode),
    "alpha": ("geo_alpha", "geo_alpha", alpha),
    "margin": ("geo_margin", "geo_margin", positive_float),
    "budget": ("geo_budget", "geo_budget", dollars),
    "budget_tokens": ("geo_budget_tokens", "geo_budget_tokens", positive_int),
}


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("geo", f"LLM prompt evaluation (pytest-geo; {connection_help('--geo-')})")
    group.addoption("--geo-dataset", action="append", default=[], metavar="PATH",
                    help="GEO JSONL dataset to evaluate; repeatable. Without positional arguments the run is "
                         "the named datasets (testpaths are not collected); the project's rootdir, prompts and "
                         "cache are kept for a dataset anywhere (ini: geo_datasets, added to any run).")
    group.addoption("--geo-mock", action="store_true", default=False,
                    help=f"use the deterministic offline mock model for every role; no network, "
                         f"no key (env: {MOCK_ENV}=1).")
    group.addoption("--geo-prompts", metavar="DIR", default=None,
                    help="prompts directory in the E-GEO layout (ini: geo_prompts; default: <rootdir>/prompts, "
                         "else ./prompts, else the defaults shipped with pytest-geo).")
    group.addoption("--geo-seed", type=any_int, default=None, metavar="N",
                    help=f"seed for choosing a missing target_id (ini: geo_seed; default: {DEFAULT_SEED}).")
    group.addoption("--geo-report", metavar="PATH", default=None,
                    help="write the JSON report (aggregates and one record per row) to PATH, and the rows' model "
                         "calls beside it to <PATH stem>.transcripts.jsonl.gz.")
    for role in ROLES:
        group.addoption(f"--geo-{role}-model", metavar="MODEL", default=None,
                        help=f"model for the {role} role (ini: geo_{role}_model; env: {MODEL_ENV[role]}; "
                             f"default: {DEFAULT_MODELS[role]}).")
    group.addoption("--geo-temperature", type=temperature, default=None, metavar="T",
                    help="sampling temperature for every call (ini: geo_temperature; default: 0, and none "
                         "for reasoning models such as o3 and gpt-5-mini, which take only their own).")
    group.addoption("--geo-reasoning-effort", type=reasoning_effort, default=None,
                    metavar="none|minimal|low|medium|high|xhigh",
                    help="reasoning_effort sent to the models that take it (reasoning models, and models "
                         "pytest-geo does not know) (ini: geo_reasoning_effort; default: the model's own).")
    group.addoption("--geo-structured", type=structured_mode, default=None, metavar="auto|on|off",
                    help="ask for answers matching a strict JSON Schema (response_format json_schema): auto "
                         "(default) falls back to plain answers, once and said in the summary, when the server "
                         "refuses it; on makes that refusal fail the run; off never asks (ini: geo_structured).")
    group.addoption("--geo-base-url", metavar="URL", default=None,
                    help="OpenAI-compatible server (ini: geo_base_url; env: OPENAI_BASE_URL; default: the "
                         "OpenAI API); its key comes from OPENAI_API_KEY.")
    group.addoption("--geo-timeout", type=positive_float, default=None, metavar="SECONDS",
                    help=f"timeout for each model call (ini: geo_timeout; env: {TIMEOUT_ENV}; default: "
                         f"{DEFAULT_TIMEOUT:g}, {LOCAL_TIMEOUT:g} for a server on this machine or a private "
                         "network).")
    group.addoption("--geo-concurrency", type=concurrency, default=None, metavar="N|auto",
                    help="most rows in flight at once; each makes at most 2 model calls at a time, so at "
                         f"most 2N requests; 'auto' (the default) starts at {DEFAULT_CONCURRENCY} "
                         f"({LOCAL_START_CONCURRENCY} for a server on this machine or a private network), raises "
                         "it while calls succeed and cuts it on 429s, Retry-After and the x-ratelimit-* "
                         "headers (ini: geo_concurrency).")
    group.addoption("--geo-max-concurrency", type=positive_int, default=None, metavar="N",
                    help="upper bound of --geo-concurrency auto, in rows (ini: geo_max_concurrency; "
                         f"default: {DEFAULT_MAX_CONCURRENCY}).")
    group.addoption("--geo-batch", action="store_true", default=None,
                    help="send the rows' model calls through the OpenAI Batch API (about half the price; "
                         "rounds of one batch each, polled until done; answers land in the answer cache, and "
                         "an interrupted run resumes its pending batches) (ini: geo_batch).")
    group.addoption("--geo-max-retries", type=non_negative_int, default=None, metavar="N",
                    help=f"retries of a failed model call (ini: geo_max_retries; default: {DEFAULT_MAX_RETRIES}).")
    group.addoption("--geo-max-output-tokens", type=positive_int, default=None, metavar="N",
                    help="most tokens of each answer, sent on every model call (as max_tokens); an answer "
                         "cut at it fails its row (ini: geo_max_output_tokens; default: sized to each answer "
                         f"for models that do not reason, else {DEFAULT_MAX_OUTPUT_TOKENS}).")
    group.addoption("--geo-split", type=split_mode, default=None, metavar="test|train|all",
                    help="suite rows to score: test (test_data, else data; default), train (data), "
                         "or all (both, reported separately) (ini: geo_split).")
    group.addoption("--geo-min-score", type=min_score, action="append", default=[], metavar="SUITE=VALUE",
                    help="fail the run when SUITE's score is below VALUE; repeatable; overrides the "
                         "suite's own threshold. SUITE: a selected suite's name, or a dataset's path "
                         "(relative to the current directory, or absolute).")
    group.addoption("--geo-max-error-rate", type=share, default=None, metavar="R",
                    help="tolerate errored rows (reported as xfailed) and fail the run only when a suite's "
                         "share of them exceeds R, between 0 and 1 (ini: geo_max_error_rate; default: every "
                         "errored row fails its own item).")
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
    group.addoption("--geo-limit", type=positive_int, default=None, metavar="N",
                    help="run only the first N rows of each dataset; the others are deselected "
                         "(ini: geo_limit).")
    group.addoption("--geo-sample", type=positive_int, default=None, metavar="N",
                    help="run N rows of each dataset drawn with --geo-seed, the same ones on every run "
                         "and under xdist; the others are deselected (ini: geo_sample).")
    group.addoption("--geo-progress", type=progress_mode, default=None, metavar="auto|on|off",
                    help="a status line of rows done, in flight, errors, retries, tokens, cost and ETA "
                         "while rows run, from 2 s into the run: redrawn on a terminal, a plain line at "
                         "most every 10 s elsewhere; auto (default) is off under -q -q (ini: geo_progress).")
    group.addoption("--geo-budget", type=dollars, default=None, metavar="DOLLARS",
                    help="spend at most DOLLARS on model calls, at list prices: each call reserves its worst "
                         "case (prompt and output-token cap) before it is sent, and a call that would cross "
                         "the budget is not sent; the rows it leaves are not run and pytest-geo::budget "
                         "fails. Shared by xdist workers (ini: geo_budget).")
    group.addoption("--geo-budget-tokens", type=positive_int, default=None, metavar="N",
                    help="the same bound in tokens (prompt and answer); for models without a price, or "
                         "together with --geo-budget (both hold) (ini: geo_budget_tokens).")
    group.addoption("--geo-baseline", metavar="PATH", default=None,
                    help="compare this run with an earlier --geo-report JSON file.")
    group.addoption("--geo-baseline-force", action="store_true", default=False,
                    help="compare with a baseline made with the mock against a real model, or with other "
                         "models (refused otherwise).")
    group.addoption("--geo-fail-on-regression", action="store_true", default=False,
                    help="with --geo-baseline: fail the run when a suite drops significantly "
                         "(paired sign test p < 0.05 and mean difference < 0).")
    group.addoption("--geo-html", metavar="PATH", default=None,
                    help="write a self-contained HTML report to PATH (it embeds the model calls of the first 200 "
                         "rows and 200 errored ones; the rest open from the transcripts file).")
    group.addoption("--geo-variant", type=variant, action="append", default=[], metavar="NAME=PATH",
                    help="compare rewriting strategies in one run; repeatable. PATH is a rewriter user "
                         "template, or a directory whose rewriter_*.txt override the run's prompts. Each row "
                         "runs once per variant (node id <dataset>::<row>[NAME]), sharing rank_before "
                         "(ini: geo_variants, one NAME = PATH a line; the command line replaces them).")
    group.addoption("--geo-sequential", action="store_true", default=None,
                    help="paired comparisons (--geo-variant, --geo-baseline) run their rows in an order drawn "
                         "with the seed, in rounds, and stop once an anytime-valid test decides them at "
                         "--geo-alpha; the rows left are skipped as not needed (ini: geo_sequential).")
    group.addoption("--geo-alpha", type=alpha, default=None, metavar="A",
                    help="the chance of a wrong --geo-sequential decision, at most "
                         f"(ini: geo_alpha; default: {DEFAULT_ALPHA:g}).")
    group.addoption("--geo-margin", type=positive_float, default=None, metavar="M",
                    help="with --geo-sequential: also decide 'equivalent' once the mean difference is "
                         "surely within M (rank places for GEO rows) (ini: geo_margin).")

    parser.addini("geo_suite_files", "glob patterns of YAML suite files", type="args", default=["*.geo.yaml"])
    parser.addini("geo_split", "suite rows to score: test, train or all", default="")
    parser.addini("geo_datasets", "GEO JSONL datasets, relative to the rootdir", type="paths", default=[])
    parser.addini("geo_prompts", "prompts directory, relative to the rootdir", default="")
    parser.addini("geo_seed", "seed for choosing a missing target_id", default="")
    for role in ROLES:
        parser.addini(f"geo_{role}_model", f"model for the {role} role", default="")
    parser.addini("geo_temperature", "sampling temperature", default="")
    parser.addini("geo_reasoning_effort", "reasoning_effort for the models that take it", default="")
    parser.addini("geo_structured", "JSON Schema answers: auto, on or off", default="")
    parser.addini("geo_base_url", "OpenAI-compatible server URL", default="")
    parser.addini("geo_timeout", "timeout for each model call, in seconds", default="")
    parser.addini("geo_concurrency", "most rows in flight at once (at most 2N model requests), or auto", default="")
    parser.addini("geo_max_concurrency", "upper bound of geo_concurrency = auto, in rows", default="")
    parser.addini("geo_max_retries", "retries of a failed model call", default="")
    parser.addini("geo_max_output_tokens", "most tokens of each answer, sent on every model call", default="")
    parser.addini("geo_batch", "model calls through the OpenAI Batch API", type="bool", default=False)
    parser.addini("geo_strict_facts", "fail rows whose rewrite adds facts", type="bool", default=False)
    parser.addini("geo_cache_dir", "directory of the model-answer cache, relative to the rootdir", default="")
    parser.addini("geo_max_error_rate", "most share of errored rows per suite (0 to 1)", default="")
    parser.addini("geo_repeats", "runs of each GEO row, each with its own candidate order", default="")
    parser.addini("geo_prices", "model prices in dollars per million tokens, one "
                  "'model = input_per_million, output_per_million' a line", type="linelist", default=[])
    parser.addini("geo_progress", "the live status line: auto, on or off", default="")
    parser.addini("geo_budget", "most dollars to spend on model calls, at list prices", default="")
    parser.addini("geo_budget_tokens", "most tokens (prompt and answer) to spend on model calls", default="")
    parser.addini("geo_limit", "run only the first N rows of each dataset", default="")
    parser.addini("geo_sample", "run N rows of each dataset drawn with the seed", default="")
    parser.addini("geo_sequential", "stop paired comparisons once decided", type="bool", default=False)
    parser.addini("geo_alpha", "the error rate of --geo-sequential decisions", default="")
    parser.addini("geo_margin", "the equivalence margin of --geo-sequential", default="")
    parser.addini("geo_variants", "rewriting strategies to compare, one NAME = PATH a line (PATH relative to "
                  "the rootdir)", type="linelist", default=[])


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


def max_error_rate(config: pytest.Config) -> float | None:
    """The error-rate gate's limit; None: only a suite whose every row errored fails."""
    limit: float | None = _pick(config, "geo_max_error_rate", "geo_max_error_rate", share)
    return limit


def settings_from_config(config: pytest.Config) -> Settings:
    given: dict[str, Any] = {name: _pick(config, *spec) for name, spec in VALUED.items()}
    given["mock"] = config.getoption("geo_mock")
    given["prompts_dir"] = prompts_dir(config)
    batch = config.getoption("geo_batch")
    given["batch"] = bool(config.getini("geo_batch") if batch is None else batch)
    strict = config.getoption("geo_strict_facts")
    given["strict_facts"] = bool(config.getini("geo_strict_facts") if strict is None else strict)
    sequential = config.getoption("geo_sequential")
    given["sequential"] = bool(config.getini("geo_sequential") if sequential is None else sequential)
    given["prices"] = _prices(config)
    given["variants"] = variant_paths(config)
    models = {role: _pick(config, f"geo_{role}_model", f"geo_{role}_model", str) for role in ROLES}
    try:
        return build_settings(given, models)
    except SettingError as exc:
        raise pytest.UsageError(str(exc)) from None


def _prices(config: pytest.Config) -> dict[str, Price]:
    from pytest_geo.llm.prices import PriceError, parse_price_lines

    try:
        return parse_price_lines(config.getini("geo_prices"))
    except PriceError as exc:
        raise pytest.UsageError(f"ini option geo_prices: {exc}") from None


def variant_paths(config: pytest.Config) -> dict[str, Path]:
    """--geo-variant (relative to the invocation directory), else the ini's geo_variants
    lines (relative to the rootdir), in the order given; a name given twice is an error.
    Only the shape is checked here: the templates are read at start (engine/variants.py)."""
    named: list[tuple[str, str]] = config.getoption("geo_variant")
    base, source = config.invocation_params.dir, "--geo-variant"
    if not named:
        base, source = config.rootpath, "ini option geo_variants"
        try:
            named = [variant(line) for line in config.getini("geo_variants") if line.strip()]
        except argparse.ArgumentTypeError as exc:
            raise pytest.UsageError(f"{source}: {exc}") from None
    variants: dict[str, Path] = {}
    for name, path in named:
        if name in variants:
            raise pytest.UsageError(f"{source}: variant {name!r} is given twice")
        variants[name] = base / path
    return variants


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
    import os

    for option in ("geo_report", "geo_html"):
        value = config.getoption(option)
        if not value:
            continue
        flag = "--" + option.replace("_", "-")
        path = config.invocation_params.dir / value
        if path.is_dir():
            raise pytest.UsageError(f"{flag}: {value} is a directory; name a file")
        parent = path.parent
        while not parent.exists() and parent != parent.parent:  # written with its missing directories
            parent = parent.parent
        if not parent.is_dir():
            raise pytest.UsageError(f"{flag}: cannot write {value}: {parent} is not a directory")
        if not os.access(parent, os.W_OK | os.X_OK):
            raise pytest.UsageError(f"{flag}: cannot write {value}: no write access to {parent}")


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
