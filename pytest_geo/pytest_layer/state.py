"""What a pytest run keeps on its config (stash keys) and how the layer reads it; below
the hooks, so collectors, items and plugin.py import it and not each other."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from pytest_geo.report.results import Results
from pytest_geo.settings import Settings

if TYPE_CHECKING:
    from pytest_geo.engine.session import GeoSession
    from pytest_geo.pytest_layer.lookahead import RunLookahead, WorkerLookahead
    from pytest_geo.report.progress import RunProgress
    from pytest_geo.suites.suite import Suite

SETTINGS = pytest.StashKey[Settings]()
SESSION: pytest.StashKey[GeoSession | None] = pytest.StashKey()
RESULTS = pytest.StashKey[Results]()
DATASETS = pytest.StashKey[set[Path]]()
HEADER_SHOWN = pytest.StashKey[bool]()  # the geo: header was printed (pytest_report_header)
LOOKAHEAD: pytest.StashKey[RunLookahead | WorkerLookahead | None] = pytest.StashKey()
REGISTERED_MARKERS = pytest.StashKey[set[str]]()
PROGRESS: pytest.StashKey[RunProgress | None] = pytest.StashKey()
# suite name -> (the suite, the file declaring it): a second suite under one name is an error
DECLARED_SUITES = pytest.StashKey[dict[str, tuple["Suite", str]]]()
MAX_ERROR_RATE: pytest.StashKey[float | None] = pytest.StashKey()  # --geo-max-error-rate


def settings_of(config: pytest.Config) -> Settings:
    return config.stash[SETTINGS]


def results_of(config: pytest.Config) -> Results:
    return config.stash[RESULTS]


def is_xdist_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def running_session(config: pytest.Config) -> GeoSession | None:
    """The engine if this run has started one (nothing is built here)."""
    return config.stash.get(SESSION, None)


def geo_session_of(config: pytest.Config) -> GeoSession:
    """The run's engine, built on first need: runs without GEO rows or prompt procedures
    never build a client, so they never need a key."""
    session = config.stash.get(SESSION, None)
    if session is None:
        session = config.stash[SESSION] = _start(config)
    return session


def _start(config: pytest.Config) -> GeoSession:
    settings = settings_of(config)
    if not settings.mock:
        # The engine's and the SDK's imports come next: the garbage left so far (a test
        # module's cycles) is finalized here, outside any import. A finalizer run by a
        # collection that starts inside an import's module lock, and importing anything
        # (pytest's report of what it raised does), breaks that import with a KeyError on
        # Python 3.10 and 3.11 (CPython gh-87712).
        gc.collect()
    # Imported here: the plugin loads in every pytest run, the engine (asyncio, the fact
    # checker's patterns) only in runs that use a model.
    from pytest_geo.engine.session import GeoSession
    from pytest_geo.llm.factory import ClientSetupError
    from pytest_geo.llm.stack import build_stack
    from pytest_geo.pytest_layer.options import set_cache_location
    from pytest_geo.templates import PromptError

    set_cache_location(config, settings)
    try:
        client = config.hook.pytest_geo_make_client(config=config, settings=settings)
        return GeoSession(settings, build_stack(settings, client))
    except (PromptError, ClientSetupError) as exc:
        stopped_at_start(config)
        raise pytest.UsageError(str(exc)) from None


def stopped_at_start(config: pytest.Config) -> None:
    """The run stops before any row (a usage error): no rows were going to run, so the
    end of the run has no evaluation to summarise (not an empty `Evals:` block)."""
    results_of(config).selected = set()


def register_marker(config: pytest.Config, name: str) -> None:
    """Suite names and declared markers are registered, so --strict-markers stays clean."""
    registered = config.stash[REGISTERED_MARKERS]
    if name not in registered:
        registered.add(name)
        config.addinivalue_line("markers", f"{name}: pytest-geo eval suite marker")
