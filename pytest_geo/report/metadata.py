"""Run metadata for the JSON report: what produced these numbers (models, server host,
prompt hashes, seed, versions, timing). Never a key and never a full URL."""

from __future__ import annotations

import hashlib
import os
import platform
import sys
from datetime import UTC, datetime
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pytest_geo.settings import Settings

PACKAGES = ("pytest-geo", "pytest", "openai")


def base_url_host(url: str | None) -> str | None:
    """Only the host name: user info, port, path and query (which may hold secrets) go."""
    if not url:
        return None
    try:
        return urlsplit(url if "//" in url else f"//{url}").hostname
    except ValueError:
        return None


def prompt_hashes(directory: Path) -> dict[str, str]:
    if not directory.is_dir():
        return {}
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.glob("*.txt")) if p.is_file()}


def versions() -> dict[str, str | None]:
    """Loaded modules' own versions, else the installed distribution's: never an import
    (`egeo` has no other use for pytest, whose import would add a tenth of a second to
    its exit)."""
    from pytest_geo import __version__

    found: dict[str, str | None] = {"pytest-geo": __version__}
    for name in ("pytest", "openai"):
        module = sys.modules.get(name)
        if module is not None and isinstance(getattr(module, "__version__", None), str):
            found[name] = module.__version__
    for name in (p for p in PACKAGES if p not in found):
        try:
            found[name] = importlib_metadata.version(name)
        except importlib_metadata.PackageNotFoundError:
            found[name] = None
    found["python"] = platform.python_version()
    return found


def run_identity(settings: Settings) -> dict[str, Any]:
    """What makes two runs' numbers comparable (a baseline is checked against it); with
    --geo-judge, the judges' models too."""
    identity: dict[str, Any] = {
        "models": dict(settings.models),
        "mock": settings.mock,
        "base_url_host": None
        if settings.mock
        else base_url_host(settings.base_url or os.environ.get("OPENAI_BASE_URL")),
        "prompts_sha256": prompt_hashes(settings.prompts_dir),
        "seed": settings.seed,
        "repeats": settings.repeats,
    }
    if settings.judges:
        identity["judges"] = {j.name: j.model for j in settings.judges}
    return identity


def run_metadata(settings: Settings, started: float, duration: float) -> dict[str, Any]:
    return {
        **run_identity(settings),
        "prompts_dir": str(settings.prompts_dir),
        "variants": {name: str(path) for name, path in settings.variants.items()},
        **({"variant_models": dict(settings.variant_models)} if settings.variant_models else {}),
        "versions": versions(),
        "started_at": datetime.fromtimestamp(started, UTC).isoformat(timespec="seconds"),
        "duration_s": round(duration, 3),
    }
