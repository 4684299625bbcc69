"""Run settings shared by the plugin and the `egeo` command, from flags, ini and env."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

MOCK_ENV = "GEO_EVAL_MOCK"
TRUTHY = frozenset({"1", "true", "yes", "on"})
DEFAULT_SEED = 1234
DEFAULT_CONCURRENCY = 16
DEFAULT_MODELS = {"ranker": "gpt-4o-mini", "rewriter": "gpt-4o-mini", "optimizer": "gpt-4o-mini"}
MODEL_ENV = {"ranker": "RANKER_MODEL", "rewriter": "REWRITER_MODEL", "optimizer": "META_MODEL"}
ROLES = ("ranker", "rewriter", "optimizer")


def env_flag(name: str, environ: os._Environ[str] | dict[str, str] | None = None) -> bool:
    value = (environ if environ is not None else os.environ).get(name, "")
    return value.strip().lower() in TRUTHY


def mock_from_env() -> bool:
    return env_flag(MOCK_ENV)


def default_model(role: str) -> str:
    return os.environ.get(MODEL_ENV[role]) or DEFAULT_MODELS[role]


@dataclass
class Settings:
    """Everything a run needs to build its model client and engine."""

    mock: bool = False
    seed: int = DEFAULT_SEED
    prompts_dir: Path = Path("prompts")
    models: dict[str, str] = field(default_factory=lambda: {r: default_model(r) for r in ROLES})
    temperature: float = 0.0
    base_url: str | None = None
    timeout: float = 60.0
    concurrency: int = DEFAULT_CONCURRENCY
    max_retries: int = 4
    cache_dir: Path | None = None
    use_cache: bool = True
    split: str = "test"
    strict_facts: bool = False
    repeats: int = 1
