"""Every option of pytest-geo in one table: the plugin's `--geo-*` flags and ini names,
`egeo`'s flags, and the documentation's options table are all made from it, so the two
front ends cannot drift apart."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, final

from pytest_geo.llm.endpoints import endpoint_flag
from pytest_geo.local_server import LOCAL_START_CONCURRENCY, LOCAL_TIMEOUT
from pytest_geo.options import (
    alpha,
    any_int,
    concurrency,
    dollars,
    judge,
    min_score,
    non_negative_int,
    positive_float,
    positive_int,
    progress_mode,
    reasoning_effort,
    shard,
    share,
    split_mode,
    structured_mode,
    submission_meta,
    temperature,
    variant,
)
from pytest_geo.settings import (
    DEFAULT_ALPHA,
    DEFAULT_CONCURRENCY,
    DEFAULT_MAX_CONCURRENCY,
    DEFAULT_MAX_OUTPUT_TOKENS,
    DEFAULT_MAX_RETRIES,
    DEFAULT_MODELS,
    DEFAULT_SEED,
    DEFAULT_TIMEOUT,
    MOCK_ENV,
    MODEL_ENV,
    ROLES,
    TIMEOUT_ENV,
)

EVALUATE, OPTIMIZE = "evaluate", "optimize"
BOTH = (EVALUATE, OPTIMIZE)
LOCAL = "for a server on this machine or a private network"


@final
@dataclass(frozen=True)
class Option:
    """One option. `help` may name other options as `{key}` (`{seed}`): each front end
    writes its own flag there. The `(ini: ...; env: ...; default: ...)` tail of `--help`
    is made from `ini`, `env` and `shown_default`."""

    name: str | None  # the pytest flag, "--geo-mock"; None: egeo or ini only
    help: str
    type: Callable[[str], Any] | None = None  # validator, raising argparse.ArgumentTypeError
    default: Any = None  # what argparse stores when the flag is absent (None: the ini, then Settings)
    metavar: str | None = None
    action: str | None = None  # "store_true" or "append"
    shown_default: str | None = None  # the default as --help and the docs say it
    ini: str | None = None
    ini_type: str | None = None  # addini's type: None (a string), "bool", "args", "linelist", "paths"
    ini_help: str | None = None  # the short text `pytest --help` lists under [pytest] ini-options
    ini_default: Any = None  # None: the empty value of ini_type
    env: str | None = None  # the environment variable read when neither flag nor ini gives it
    egeo: str | None = None  # egeo's flag, "--mock"; None: pytest only
    egeo_aliases: tuple[str, ...] = ()
    egeo_commands: tuple[str, ...] = (EVALUATE,)
    egeo_help: str | None = None  # where egeo's text must differ (it has no ini, xdist or baseline)
    egeo_kwargs: Mapping[str, Any] = field(default_factory=dict)  # argparse keywords only egeo takes
    setting: bool = False  # the value goes to the Settings field named `key`

    @property
    def key(self) -> str:
        """The option's stem: egeo's argparse dest, and `geo_` + key is the plugin's."""
        flag = self.name.removeprefix("--geo-") if self.name else (self.egeo or "").removeprefix("--")
        return (flag or (self.ini or "").removeprefix("geo_")).replace("-", "_")

    @property
    def dest(self) -> str:
        return f"geo_{self.key}"

    def tail(self, ini: bool) -> str:
        parts = [f"ini: {self.ini}"] if ini and self.ini else []
        if self.env:  # a flag's variable turns it on with 1
            parts.append(f"env: {self.env}=1" if self.action == "store_true" else f"env: {self.env}")
        parts += [f"default: {self.shown_default}"] if self.shown_default else []
        return f" ({'; '.join(parts)})" if parts else ""


def _roles() -> list[Option]:
    egeo = {"ranker": "--ranker-model", "rewriter": "--rewriter-model", "optimizer": "--meta-model"}
    return [Option(
        f"--geo-{role}-model", f"{role} model", metavar="MODEL", shown_default=DEFAULT_MODELS[role],
        ini=f"geo_{role}_model", ini_help=f"model for the {role} role", env=MODEL_ENV[role], egeo=egeo[role],
        egeo_aliases=("--optimizer-model",) if role == "optimizer" else (),
        egeo_commands=(OPTIMIZE,) if role == "optimizer" else BOTH,
    ) for role in ROLES]


OPTIONS: tuple[Option, ...] = (
    Option("--geo-dataset", "GEO JSONL dataset to evaluate; repeatable. Without positional arguments the run "
           "is the named datasets (testpaths are not collected); the project's rootdir, prompts and cache are "
           "kept for a dataset anywhere. The ini's datasets are added to any run",
           action="append", default=[], metavar="PATH", ini="geo_datasets", ini_type="paths",
           ini_help="GEO JSONL datasets, relative to the rootdir", egeo="--dataset",
           egeo_help="GEO JSONL dataset (default: the project's, as pytest runs it: geo_datasets in its pytest "
           "configuration, else the dataset its YAML suite scores by rank_improvement)",
           egeo_kwargs={"action": "store", "default": None, "type": Path}),
    Option("--geo-mock", "the deterministic offline mock model for every role; no network, no key",
           action="store_true", default=False, env=MOCK_ENV, egeo="--mock",
           egeo_commands=BOTH, setting=True),
    Option("--geo-prompts", "prompts directory in the E-GEO layout", metavar="DIR",
           shown_default="<rootdir>/prompts (pytest), else ./prompts, else the defaults shipped with pytest-geo",
           ini="geo_prompts", ini_help="prompts directory, relative to the rootdir", egeo="--prompts",
           egeo_commands=BOTH),
    Option("--geo-seed", "seed for choosing a missing target_id, drawing {sample} rows and ordering "
           "{sequential} rows (and for egeo optimize's search)", type=any_int, metavar="N",
           shown_default=str(DEFAULT_SEED), ini="geo_seed", ini_help="seed for choosing a missing target_id",
           egeo="--seed", egeo_commands=BOTH, setting=True),
    Option("--geo-report", "write the JSON report (aggregates and one record per row) to PATH, and the rows' "
           "model calls beside it to <PATH stem>.transcripts.jsonl.gz", metavar="PATH", egeo="--report"),
    Option("--geo-html", "write a self-contained HTML report to PATH (it embeds the model calls of the first "
           "200 rows and 200 errored ones; the rest open from the transcripts file)", metavar="PATH",
           egeo="--html"),
    Option("--geo-egeo-submission", "write the E-GEO leaderboard's submission files (metadata.json, results.json, "
           "rewrites.jsonl) to DIR, one folder per variant; the judges' keys are their model ids (gpt_5, "
           "claude_sonnet_4_5, ...)", metavar="DIR", egeo="--egeo-submission"),
    Option("--geo-submission-meta", "metadata of the E-GEO submission: name, contact, type (model+prompt, fine-tuned "
           "or agent), description, code_url, paper_url; repeatable (pytest: the flags replace the ini's lines)",
           type=submission_meta, action="append", default=[], metavar="KEY=VALUE", ini="geo_submission_meta",
           ini_type="linelist", ini_help="E-GEO submission metadata, one KEY = VALUE a line",
           egeo="--submission-meta"),
    *_roles(),
    Option("--geo-temperature", "sampling temperature for every call", type=temperature, metavar="T",
           shown_default="0, and none for reasoning models such as o3 and gpt-5-mini, which take only their own",
           ini="geo_temperature", ini_help="sampling temperature", egeo="--temperature", egeo_commands=BOTH,
           setting=True),
    Option("--geo-reasoning-effort", "reasoning_effort sent to the models that take it (reasoning models, and "
           "models pytest-geo does not know)", type=reasoning_effort, metavar="none|minimal|low|medium|high|xhigh",
           shown_default="the model's own", ini="geo_reasoning_effort",
           ini_help="reasoning_effort for the models that take it", egeo="--reasoning-effort",
           egeo_commands=BOTH, setting=True),
    Option("--geo-structured", "ask for answers matching a strict JSON Schema (response_format json_schema): "
           "auto falls back to plain answers, once and said at the end of the run, when the server refuses "
           "it; on makes that refusal fail the run; off never asks", type=structured_mode, metavar="auto|on|off",
           shown_default="auto", ini="geo_structured", ini_help="JSON Schema answers: auto, on or off",
           egeo="--structured", egeo_commands=BOTH, setting=True),
    Option("--geo-base-url", "OpenAI-compatible server; its key comes from OPENAI_API_KEY", metavar="URL",
           shown_default="the OpenAI API", ini="geo_base_url", ini_help="OpenAI-compatible server URL",
           env="OPENAI_BASE_URL", egeo="--base-url", egeo_commands=BOTH, setting=True),
    Option("--geo-timeout", "timeout for each model call, in seconds", type=positive_float, metavar="SECONDS",
           shown_default=f"{DEFAULT_TIMEOUT:g}, {LOCAL_TIMEOUT:g} {LOCAL}", ini="geo_timeout",
           ini_help="timeout for each model call, in seconds", env=TIMEOUT_ENV, egeo="--timeout", setting=True),
    Option("--geo-concurrency", "most rows in flight at once; each makes at most 2 model calls at a time, so at "
           f"most 2N requests; auto starts at {DEFAULT_CONCURRENCY} ({LOCAL_START_CONCURRENCY} {LOCAL}), raises "
           "it while calls succeed and cuts it on 429s, Retry-After and the x-ratelimit-* headers",
           type=concurrency, metavar="N|auto", shown_default="auto", ini="geo_concurrency",
           ini_help="most rows in flight at once (at most 2N model requests), or auto", egeo="--concurrency",
           egeo_commands=BOTH, setting=True),
    Option("--geo-max-concurrency", "upper bound of {concurrency} auto, in rows", type=positive_int, metavar="N",
           shown_default=str(DEFAULT_MAX_CONCURRENCY), ini="geo_max_concurrency",
           ini_help="upper bound of geo_concurrency = auto, in rows", egeo="--max-concurrency",
           egeo_commands=BOTH, setting=True),
    Option("--geo-batch", "send the rows' model calls through the OpenAI Batch API (about half the price; "
           "rounds of one batch each, polled until done; answers land in the answer cache, and an interrupted "
           "run resumes its pending batches)", action="store_true", ini="geo_batch", ini_type="bool",
           ini_help="model calls through the OpenAI Batch API", egeo="--batch", setting=True),
    Option("--geo-max-retries", "retries of a failed model call", type=non_negative_int, metavar="N",
           shown_default=str(DEFAULT_MAX_RETRIES), ini="geo_max_retries", ini_help="retries of a failed model call",
           egeo="--max-retries", setting=True),
    Option("--geo-max-output-tokens", "most tokens of each answer, sent on every model call (as max_tokens); an "
           "answer cut at it fails its row", type=positive_int, metavar="N",
           shown_default=f"sized to each answer for models that do not reason, else {DEFAULT_MAX_OUTPUT_TOKENS}",
           ini="geo_max_output_tokens",
           ini_help="most tokens of each answer, sent on every model call", egeo="--max-output-tokens",
           egeo_commands=BOTH, setting=True),
    Option("--geo-split", "suite rows to score: test (test_data, else data), train (data), or all (both, "
           "reported separately)", type=split_mode, metavar="test|train|all", shown_default="test",
           ini="geo_split", ini_help="suite rows to score: test, train or all", setting=True),
    Option("--geo-min-score", "fail the run when SUITE's score is below VALUE; repeatable; overrides the suite's "
           "own threshold. SUITE: a selected suite's name, or a dataset's path (relative to the current "
           "directory, or absolute)", type=min_score, action="append", default=[], metavar="SUITE=VALUE"),
    Option("--geo-max-error-rate", "tolerate errored rows (reported as xfailed) and fail the run only when a "
           "suite's share of them exceeds R, between 0 and 1", type=share, metavar="R",
           shown_default="every errored row fails its own item", ini="geo_max_error_rate",
           ini_help="most share of errored rows per suite (0 to 1)"),
    Option("--geo-strict-facts", "a rewrite that adds facts (numbers, prices, model numbers, certifications) not "
           "in the original scores 0.0 and fails its item", action="store_true", ini="geo_strict_facts",
           ini_type="bool", ini_help="fail rows whose rewrite adds facts", setting=True),
    Option("--geo-query-blind", "the rewriter sees only the target's own title and description, as E-GEO's rules "
           "require: a rewriter prompt that uses the query is a usage error before any call (the packaged prompts' "
           "rewriter gives way to the simple style)", action="store_true", shown_default="on for E-GEO data files",
           ini="geo_query_blind", ini_type="bool", ini_help="the rewriter never sees the query (E-GEO's rule)",
           egeo="--query-blind", setting=True),
    Option("--geo-rewrites", "score the rewrites in FILE (E-GEO's rewrites.jsonl, or a JSON array of its "
           "objects) instead of making them: only the rankers are called. Every query of the run needs one, "
           "with rand_idx its target's index and non-empty initial_product and optimized_product",
           metavar="FILE", egeo="--rewrites"),
    Option("--geo-plan", "print the run's plan and exit without calling a model: its calls, tokens and "
           "worst-case dollars per role, judge and endpoint, and its wall time (egeo: the plan command)",
           action="store_true", default=False),
    Option("--geo-cache-dir", "directory of the model-answer cache", metavar="DIR",
           shown_default="the pytest cache, <rootdir>/.pytest_cache/d/geo", ini="geo_cache_dir",
           ini_help="directory of the model-answer cache, relative to the rootdir", egeo="--cache-dir",
           egeo_help="model-answer cache (default: .pytest_cache/d/geo, the pytest plugin's default when this "
           "directory is pytest's rootdir, so the two share answers); the mock is never cached",
           egeo_commands=BOTH),
    Option("--geo-no-cache", "neither read nor write the model-answer cache", action="store_true", default=False,
           egeo="--no-cache", egeo_commands=BOTH),
    Option("--geo-repeats", "run each GEO row K times, each with its own seeded candidate order, and average "
           "them", type=positive_int, metavar="K", shown_default="1", ini="geo_repeats",
           ini_help="runs of each GEO row, each with its own candidate order", egeo="--repeats", setting=True),
    Option("--geo-limit", "run only the first N rows of each dataset; the others are not run (pytest deselects them)",
           type=positive_int, metavar="N", ini="geo_limit", ini_help="run only the first N rows of each dataset",
           egeo="--limit", setting=True),
    Option("--geo-sample", "run N rows of each dataset (after {limit}) drawn with {seed}, the same ones on every "
           "run, under xdist and in both egeo and pytest; the others are not run (pytest deselects them)",
           type=positive_int, metavar="N", ini="geo_sample", ini_help="run N rows of each dataset drawn with the seed",
           egeo="--sample", setting=True),
    Option("--geo-shard", "run the K-th of N shards of the rows (after {limit} and {sample}): a row's shard is a "
           "stable hash of its dataset and name, so shards split a run across CI jobs and adding rows moves none; "
           "merge their reports with egeo merge", type=shard, metavar="K/N", egeo="--shard", setting=True),
    Option("--geo-progress", "a status line of rows done, in flight, errors, retries, tokens, cost and ETA while "
           "rows run (egeo: on stderr), from 2 s into the run: redrawn on a terminal, a plain line at most every "
           "10 s elsewhere; auto is off under pytest -q -q", type=progress_mode, metavar="auto|on|off",
           shown_default="auto", ini="geo_progress", ini_help="the live status line: auto, on or off",
           egeo="--progress", setting=True),
    Option("--geo-budget", "spend at most DOLLARS on model calls, at list prices: each call reserves its worst "
           "case (prompt and output-token cap) before it is sent, and a call that would cross the budget is not "
           "sent; the rows it leaves are not run and the run fails (pytest: pytest-geo::budget fails; shared "
           "by xdist workers)", type=dollars, metavar="DOLLARS", ini="geo_budget",
           ini_help="most dollars to spend on model calls, at list prices", egeo="--budget", egeo_commands=BOTH,
           setting=True),
    Option("--geo-budget-tokens", "the same bound in tokens (prompt and answer); for models without a price, or "
           "together with {budget} (both hold)", type=positive_int, metavar="N", ini="geo_budget_tokens",
           ini_help="most tokens (prompt and answer) to spend on model calls", egeo="--budget-tokens",
           egeo_commands=BOTH, setting=True),
    Option("--geo-baseline", "compare this run with an earlier {report} JSON file", metavar="PATH"),
    Option("--geo-baseline-force", "compare with a baseline made with the mock against a real model, or with "
           "other models (refused otherwise)", action="store_true", default=False),
    Option("--geo-fail-on-regression", "with {baseline}: fail the run when a suite drops significantly (paired "
           "sign test p < 0.05 and mean difference < 0)", action="store_true", default=False),
    Option("--geo-variant", "compare rewriting strategies in one run; repeatable. PATH is a rewriter user "
           "template, or a directory whose rewriter_*.txt override the run's prompts. Each row runs once per "
           "variant (node id <dataset>::<row>[NAME]), sharing rank_before (pytest: the flags replace the ini's "
           "lines)", type=variant, action="append", default=[],
           metavar="NAME=PATH", ini="geo_variants", ini_type="linelist",
           ini_help="rewriting strategies to compare, one NAME = PATH[@MODEL] a line (PATH relative to the "
           "rootdir); @MODEL names the variant's rewriter model",
           egeo="--variant"),
    Option("--geo-judge", "a panel of judges: each ranks every row before and after its rewrite (one rewrite per "
           "variant, shared by the judges); repeatable. Optional per-judge settings after the model: "
           "system=PATH temperature=T max_output_tokens=N. The summary and reports then hold each judge's "
           "figures, the panel's (each row's mean over its judges) and their agreement (pytest: the flags "
           "replace the ini's lines)", type=judge, action="append", default=[], metavar="NAME=MODEL",
           ini="geo_judges", ini_type="linelist",
           ini_help="a panel of judges, one NAME = MODEL [system=PATH] [temperature=T] [max_output_tokens=N] "
           "a line (PATH relative to the rootdir)", egeo="--judge"),
    Option("--geo-sequential", "paired comparisons ({variant}, {baseline}) run their rows in an order drawn with "
           "the seed, in rounds, and stop once an anytime-valid test decides them at {alpha}; the rows left are "
           "skipped as not needed", action="store_true", ini="geo_sequential", ini_type="bool",
           ini_help="stop paired comparisons once decided", egeo="--sequential",
           egeo_help="with two or more --variant: rows in an order drawn with --seed, in rounds, stopping once "
           "an anytime-valid test decides every pair at --alpha", setting=True),
    Option("--geo-alpha", "the chance of a wrong {sequential} decision, at most", type=alpha, metavar="A",
           shown_default=f"{DEFAULT_ALPHA:g}", ini="geo_alpha", ini_help="the error rate of --geo-sequential decisions",
           egeo="--alpha", setting=True),
    Option("--geo-margin", "with {sequential}: also decide 'equivalent' once the mean difference is surely "
           "within M (rank places for GEO rows)", type=positive_float, metavar="M", ini="geo_margin",
           ini_help="the equivalence margin of --geo-sequential", egeo="--margin", setting=True),
    # ini only
    Option(None, "glob patterns of YAML suite files", ini="geo_suite_files", ini_type="args",
           ini_default=["*.geo.yaml"], shown_default="*.geo.yaml"),
    Option(None, "model prices in dollars per million tokens, one 'model = input_per_million, "
           "output_per_million[, cached_input_per_million[, cache_write_per_million]]' a line", ini="geo_prices",
           ini_type="linelist"),
    Option(None, "servers a model names by its prefix (NAME/model), added to or overriding the known providers "
           "(openai, openrouter, anthropic, gemini, deepseek, together, groq, mistral, fireworks, ollama): one "
           "'NAME = BASE_URL [KEY_VARIABLE]' a line in the ini, egeo's --endpoint NAME=URL[,KEY_VARIABLE] "
           "repeatable; no key variable: the server takes no key",
           type=endpoint_flag, action="append", default=[], metavar="NAME=URL[,KEYVAR]", ini="geo_endpoints",
           ini_type="linelist", ini_help="servers a model names by its prefix (NAME/model), one "
           "'NAME = BASE_URL [KEY_VARIABLE]' a line", egeo="--endpoint", egeo_commands=BOTH),
    # egeo only
    Option(None, "print one JSON line per row before the metrics", action="store_true", default=False,
           egeo="--verbose"),
    Option(None, "GEO JSONL rows that drive the proposals", type=Path, metavar="PATH", egeo="--train",
           egeo_commands=(OPTIMIZE,)),
    Option(None, "GEO JSONL rows that choose the best candidate", type=Path, metavar="PATH", egeo="--val",
           egeo_commands=(OPTIMIZE,)),
    Option(None, "instead of --train/--val: a Python file whose prompt procedures marked optimize=True are each "
           "scored by their same-named eval suite", type=Path, metavar="FILE", egeo="--suites",
           egeo_commands=(OPTIMIZE,)),
    Option(None, "proposals to try", type=positive_int, default=5, metavar="N", shown_default="5",
           egeo="--iters", egeo_commands=(OPTIMIZE,)),
    Option(None, "most row evaluations (one candidate on one row) in the search", type=positive_int,
           metavar="N", egeo="--max-metric-calls", egeo_commands=(OPTIMIZE,)),
    Option(None, "also replace rewriter_user.txt with the best candidate", action="store_true", default=False,
           egeo="--apply", egeo_commands=(OPTIMIZE,)),
)

BY_KEY = {option.key: option for option in OPTIONS}
EMPTY_INI: dict[str | None, Any] = {None: "", "bool": False, "args": [], "linelist": [], "paths": []}


def _flags(pytest: bool) -> dict[str, str]:
    """Each option's flag on one front end, for the `{key}`s in help texts (the other
    front end's flag where this one has none)."""
    first, second = ("name", "egeo") if pytest else ("egeo", "name")
    return {o.key: getattr(o, first) or getattr(o, second) or o.ini or "" for o in OPTIONS}


def _argparse_keywords(option: Option) -> dict[str, Any]:
    keywords: dict[str, Any] = {"default": option.default}
    for name in ("type", "metavar", "action"):
        if getattr(option, name) is not None:
            keywords[name] = getattr(option, name)
    return keywords


def add_pytest_options(parser: Any, group: Any) -> None:
    """The plugin's flags into `group` (pytest's `parser.getgroup`) and their ini names
    into `parser` (`pytest.Parser`, typed Any so this module does not import pytest)."""
    flags = _flags(pytest=True)
    for option in OPTIONS:
        if option.name is not None:
            text = option.help.format_map(flags) + option.tail(ini=True)
            group.addoption(option.name, help=text, **_argparse_keywords(option))
        if option.ini is not None:
            default = EMPTY_INI[option.ini_type] if option.ini_default is None else option.ini_default
            parser.addini(option.ini, option.ini_help or option.help, type=option.ini_type, default=default)


def add_egeo_options(parser: argparse.ArgumentParser, command: str) -> None:
    """egeo's flags of `command` ("evaluate" or "optimize")."""
    flags = _flags(pytest=False)
    for option in OPTIONS:
        if option.egeo is None or command not in option.egeo_commands:
            continue
        text = option.egeo_help or (option.help.format_map(flags) + option.tail(ini=False))
        keywords = {**_argparse_keywords(option), **option.egeo_kwargs}
        parser.add_argument(option.egeo, *option.egeo_aliases, dest=option.key, help=text, **keywords)


def egeo_options(command: str) -> Iterable[Option]:
    return (o for o in OPTIONS if o.egeo is not None and command in o.egeo_commands)


def options_markdown() -> str:
    """The documentation's options reference: one table row per option."""
    flags = _flags(pytest=True)
    lines = ["| pytest flag | ini | environment | egeo flag | default | what it does |",
             "|---|---|---|---|---|---|"]
    for o in OPTIONS:
        pytest_flag = f"`{o.name} {o.metavar}`" if o.name and o.metavar else f"`{o.name}`" if o.name else ""
        egeo = f"`{o.egeo}` ({', '.join(o.egeo_commands)})" if o.egeo else ""
        cells = [pytest_flag, f"`{o.ini}`" if o.ini else "", f"`{o.env}`" if o.env else "", egeo,
                 o.shown_default or "", o.help.format_map(flags)]
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(lines) + "\n"
