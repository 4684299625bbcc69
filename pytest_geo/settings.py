"""Run settings shared by the plugin and the `egeo` command: every default lives here,
and `build_settings` turns what a user gave (flags, ini, environment) into one object."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_geo.judge import Judge
from pytest_geo.local_server import LOCAL_START_CONCURRENCY, LOCAL_TIMEOUT, server_is_local
from pytest_geo.price import Price

if TYPE_CHECKING:
    from pytest_geo.llm.endpoints import Endpoint

MOCK_ENV = "GEO_EVAL_MOCK"
TRUTHY = frozenset({"1", "true", "yes", "on"})
FALSY = frozenset({"", "0", "false", "no", "off"})
DEFAULT_SEED = 7  # the E-GEO harness's default: the same rows and seed choose the same targets
DEFAULT_CONCURRENCY = 16
DEFAULT_MAX_CONCURRENCY = 256
AUTO = "auto"
DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_TIMEOUT = 60.0
TIMEOUT_ENV = "OPENAI_TIMEOUT_SECONDS"  # the E-GEO harness's variable: used when no flag or ini gives one
STRUCTURED_MODES = ("auto", "on", "off")
DEFAULT_MAX_RETRIES = 4
DEFAULT_ALPHA = 0.05  # --geo-alpha: the error rate --geo-sequential decisions keep
# Sent on every model call. A ranking of 100 candidates is about 1,000 tokens (an id, its
# quotes and comma are up to ten), a long rewrite 1,000 to 2,000, a proposed prompt about
# as much: 4,096 holds each twice over, and is what older models accept as max_tokens.
DEFAULT_MAX_OUTPUT_TOKENS = 4096
# The output cap's flag as each command line spells it: a cut answer's message names it.
OUTPUT_CAP_FLAGS = {"pytest": "--geo-max-output-tokens", "egeo": "--max-output-tokens"}
DEFAULT_MODELS = {"ranker": "gpt-4o-mini", "rewriter": "gpt-4o-mini", "optimizer": "gpt-4o-mini"}
MODEL_ENV = {"ranker": "RANKER_MODEL", "rewriter": "REWRITER_MODEL", "optimizer": "META_MODEL"}
ROLES = ("ranker", "rewriter", "optimizer")
SPLITS = ("test", "train", "all")
# The answer cache lives in the pytest cache of the project (relative to its rootdir for
# the plugin, to the working directory for `egeo`), so the two share answers.
PYTEST_CACHE = Path(".pytest_cache")
DEFAULT_CACHE_DIR = PYTEST_CACHE / "d" / "geo"
# The E-GEO prompts shipped with the package: the one copy of the default prompt text.
PACKAGED_PROMPTS = Path(__file__).resolve().with_name("prompts")
PROMPTS_DIRNAME = "prompts"


def connection_help(prefix: str) -> str:
    """What --help says about the model and its key, for pytest's group (`prefix`
    "--geo-") and for egeo ("--")."""
    models = " / ".join(sorted(set(DEFAULT_MODELS.values())))
    return (f"models default to {models} (change with {prefix}*-model or RANKER_MODEL, REWRITER_MODEL, "
            f"META_MODEL); the API key comes from OPENAI_API_KEY, the server from OPENAI_BASE_URL (default: "
            f"the OpenAI API); {prefix}mock runs offline without a key")


def env_flag(name: str, environ: Mapping[str, str] | None = None) -> bool:
    """A yes/no variable. A value that is neither (`y`, `maybe`, `2`) is refused: read as
    "no", `GEO_EVAL_MOCK=y` would run a real, paid run where the user asked for the mock."""
    raw = (environ if environ is not None else os.environ).get(name, "")
    value = raw.strip().lower()
    if value in TRUTHY:
        return True
    if value in FALSY:
        return False
    raise SettingError(f"{name}={raw!r} is neither yes ({', '.join(sorted(TRUTHY))}) "
                       f"nor no ({', '.join(sorted(FALSY - {''}))}, or unset)")


def mock_from_env() -> bool:
    return env_flag(MOCK_ENV)


def default_model(role: str) -> str:
    return os.environ.get(MODEL_ENV[role]) or DEFAULT_MODELS[role]


def find_prompts_dir(
    named: Path | str | None = None,
    ini: str | None = None,
    rootdir: Path | None = None,
    invocation_dir: Path | None = None,
) -> Path:
    """The prompts directory a run uses, in this order: the one named on the command line
    (relative to the invocation directory), the ini value (relative to the rootdir),
    `<rootdir>/prompts`, `<invocation dir>/prompts`, then the packaged defaults. A
    directory the user named is returned even if missing (loading it then says so): a
    typo must never fall back to other prompts silently. The plugin and `egeo` both
    look here (egeo has no ini and no rootdir)."""
    here = invocation_dir or Path.cwd()
    if named:
        return (here / named).resolve()
    if ini and rootdir is not None:
        return (rootdir / ini).resolve()
    for base in (rootdir, here):
        if base is not None and (base / PROMPTS_DIRNAME).is_dir():
            return (base / PROMPTS_DIRNAME).resolve()
    return PACKAGED_PROMPTS


def is_packaged(prompts_dir: Path) -> bool:
    return prompts_dir.resolve() == PACKAGED_PROMPTS


def describe_prompts(prompts_dir: Path) -> str:
    """For header lines: the path, and whether it is the packaged defaults."""
    return f"{prompts_dir} (packaged defaults)" if is_packaged(prompts_dir) else str(prompts_dir)


@dataclass
class Settings:
    """Everything a run needs to build its model client and engine."""

    mock: bool = False
    seed: int = DEFAULT_SEED
    prompts_dir: Path = field(default_factory=find_prompts_dir)
    models: dict[str, str] = field(default_factory=lambda: {r: default_model(r) for r in ROLES})
    # None: not set, so each model gets its profile's choice (0 for chat models, none for
    # reasoning models, llm/profiles.py); a number set by the user is sent as it is.
    temperature: float | None = None
    reasoning_effort: str | None = None  # --geo-reasoning-effort, for models that take it
    structured: str = "auto"  # --geo-structured: ask for JSON Schema answers (auto, on, off)
    base_url: str | None = None
    # Servers a model names by its prefix (`NAME/model`, llm/endpoints.py): geo_endpoints
    # or egeo --endpoint, added to or overriding the known providers.
    endpoints: dict[str, Endpoint] = field(default_factory=dict)
    timeout: float = DEFAULT_TIMEOUT
    timeout_given: bool = False  # by a flag, the ini or the environment: every endpoint keeps it
    start_concurrency: int = DEFAULT_CONCURRENCY  # where auto concurrency starts, in rows
    # Rows in flight, fixed; None is `auto` (the default): they follow what the provider
    # accepts, from DEFAULT_CONCURRENCY up to max_concurrency (llm/adaptive.py).
    concurrency: int | None = None
    max_concurrency: int = DEFAULT_MAX_CONCURRENCY  # auto's upper bound
    batch: bool = False  # --geo-batch: model calls through the OpenAI Batch API (llm/batch.py)
    max_retries: int = DEFAULT_MAX_RETRIES
    # each answer's token cap, sent on every call; None: sized to the answer where the model
    # does not reason (llm/profiles.py sized_cap), else DEFAULT_MAX_OUTPUT_TOKENS
    max_output_tokens: int | None = None
    front_end: str = "pytest"  # "egeo" when the egeo command runs: messages name its flags
    cache_dir: Path | None = None
    use_cache: bool = True
    split: str = "test"
    strict_facts: bool = False
    query_blind: bool = False  # the rewriter never sees the query (E-GEO's rule; engine/query_blind.py)
    egeo_data: bool = False  # the run names E-GEO data: the packaged prompts' ranker is E-GEO's (same module)
    rewrites: Path | None = None  # --geo-rewrites: score these rewrites, no rewriter call (data/rewrites_file.py)
    repeats: int = 1
    limit: int | None = None  # the first N rows of each dataset
    sample: int | None = None  # N rows of each dataset drawn with the seed
    shard: tuple[int, int] | None = None  # (K, N): the K-th of N shards of the rows (data/sampling.py)
    progress: str = "auto"  # the live status line: auto, on or off
    prices: dict[str, Price] = field(default_factory=dict)  # added to or overriding llm/prices.py's table
    # Rewriting strategies compared in one run, in the user's order: name -> a rewriter
    # user template, or a directory of rewriter prompts (engine/variants.py). Empty: none.
    variants: dict[str, Path] = field(default_factory=dict)
    # A variant's rewriter model (`NAME=PATH@MODEL`), by variant name; absent: the run's.
    variant_models: dict[str, str] = field(default_factory=dict)
    # A panel of judges (engine/judges.py), in the user's order; empty: the ranker judges alone.
    judges: list[Judge] = field(default_factory=list)
    # --geo-sequential: paired comparisons (variants, the baseline) stop once decided at
    # `alpha`; with a `margin`, "equivalent within margin" decides too (report/stopping.py).
    sequential: bool = False
    alpha: float = DEFAULT_ALPHA
    margin: float | None = None
    # Spending limits, never crossed (llm/budget.py): dollars at list prices, and tokens
    # (prompt and answer); None: no limit. The ledger file is shared by the run's processes.
    budget: float | None = None
    budget_tokens: int | None = None
    budget_ledger: Path | None = None


SETTING_NAMES = frozenset(f.name for f in fields(Settings))


def build_settings(given: Mapping[str, Any], models: Mapping[str, str | None] | None = None) -> Settings:
    """`given` maps Settings fields to what the user gave, None where nothing was: the
    defaults above apply, a concurrency of "auto" is the default (None), the mock can
    also come from GEO_EVAL_MOCK and each model from its environment variable.
    The plugin and `egeo` both build their settings here."""
    unknown = set(given) - SETTING_NAMES
    if unknown:
        raise TypeError(f"unknown settings: {', '.join(sorted(unknown))}")
    given = {name: None if name == "concurrency" and value == AUTO else value for name, value in given.items()}
    settings = Settings(**{name: value for name, value in given.items() if value is not None})
    settings.mock = bool(given.get("mock")) or mock_from_env()
    for role, model in (models or {}).items():
        if model:
            settings.models[role] = model
    local = not settings.mock and server_is_local(settings.base_url)
    if given.get("timeout") is None:
        from_env = timeout_from_env()
        settings.timeout_given = from_env is not None
        settings.timeout = from_env or (LOCAL_TIMEOUT if local else DEFAULT_TIMEOUT)
    else:
        settings.timeout_given = True
    if local:
        settings.start_concurrency = LOCAL_START_CONCURRENCY
    if settings.rewrites is not None and settings.variants:
        raise SettingError("given rewrites (--geo-rewrites, egeo --rewrites) are one rewriter's: they do not "
                           "combine with variants")
    return settings


class SettingError(ValueError):
    """A setting from the environment that cannot be used; the message names it."""


def timeout_from_env(environ: Mapping[str, str] | None = None) -> float | None:
    raw = (environ if environ is not None else os.environ).get(TIMEOUT_ENV, "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise SettingError(f"{TIMEOUT_ENV}={raw!r} is not a number of seconds above 0")
    return value


def server_url(base_url: str | None) -> str:
    """The server the OpenAI client calls: the URL given, else OPENAI_BASE_URL, else OpenAI's."""
    return (base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")
