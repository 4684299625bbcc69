"""What the benchmarks share, so they run on the same rows and the same server and cannot
drift apart: the repository paths (the default prompts live in the package,
`pytest_geo/prompts/`), the "red kettle" GEO dataset the fake server answers so every row
passes, and the fake OpenAI server (`tests/fake_openai.py`) run in its own process, off
the client's GIL.

The benches are scripts (`python bench/bench_x.py`), so their folder is on `sys.path`
and they import this module as `common`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pytest_geo.data.dataset import GeoRow, iter_dataset
from pytest_geo.engine.experiment import GeoOutcome
from pytest_geo.engine.session import GeoSession

REPO = Path(__file__).resolve().parent.parent
PROMPTS = REPO / "pytest_geo" / "prompts"
FAKE_SERVER = REPO / "tests" / "fake_openai.py"


def write_kettle_dataset(n: int, path: Path) -> None:
    """Write n "red kettle" GEO rows to `path` (JSONL): rows the fake server answers so
    they pass."""
    with path.open("w", encoding="utf-8") as handle:
        for i in range(n):
            handle.write(json.dumps({
                "query_id": f"r{i}", "query": f"red kettle number {i}", "target_id": f"t{i}",
                "candidates": [{"id": f"a{i}", "title": "Red kettle", "description": f"red kettle number {i}"},
                               {"id": f"b{i}", "title": "Kettle", "description": "a kettle"},
                               {"id": f"t{i}", "title": "Thing", "description": "steel, 1.7 litres"}]}) + "\n")


def write_decoy_dataset(n: int, path: Path, candidates: int = 10) -> None:
    """Write n GEO rows of `candidates` candidates each to `path` (JSONL): the target, a
    close match and decoys, the rows the harness and scale benches run."""
    with path.open("w", encoding="utf-8") as handle:
        for i in range(n):
            decoys = [{"id": f"d{i}-{k}", "title": f"Kettle {k}", "description": f"a kettle, model {k}"}
                      for k in range(candidates - 2)]
            handle.write(json.dumps({
                "query_id": f"r{i}", "query": f"red kettle number {i}", "target_id": f"t{i}",
                "candidates": [{"id": f"a{i}", "title": "Red kettle", "description": f"red kettle number {i}"},
                               *decoys,
                               {"id": f"t{i}", "title": "Thing", "description": "steel, 1.7 litres"}]}) + "\n")


def kettle_rows(n: int, directory: Path) -> list[GeoRow]:
    """The n kettle rows, written to `directory / "bench.jsonl"` and parsed (seed 0)."""
    path = directory / "bench.jsonl"
    write_kettle_dataset(n, path)
    return [r for r in iter_dataset(path, 0) if isinstance(r, GeoRow)]


@contextmanager
def fake_server(latency: float, *extra_args: str) -> Iterator[str]:
    """Run `tests/fake_openai.py --latency L [extra_args]` (e.g. its rate-limit flags
    `--rate`, `--max-in-flight`, `--rate-headers`) in its own process; yield its base URL,
    `http://127.0.0.1:{port}/v1`. Exits loudly if the first line it prints is not a port;
    terminates and reaps the process on the way out. The server takes any key: a dummy one
    is set for the clients the bench builds when the environment has none."""
    os.environ.setdefault("OPENAI_API_KEY", "bench-dummy")
    process = subprocess.Popen([sys.executable, str(FAKE_SERVER), "--latency", str(latency), *extra_args],
                               stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        port = process.stdout.readline().strip()
        if not port.isdigit():
            raise SystemExit(f"fake server {FAKE_SERVER} did not print a port first: {port!r} (its stderr above)")
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        process.terminate()
        process.wait()


def timed_evaluate(session: GeoSession, rows: list[GeoRow]) -> tuple[float, list[GeoOutcome]]:
    """Wall seconds for `session` to run `rows` (the plugin's path: scheduled at once, then
    waited for in order) and their outcomes; the session is closed afterwards."""
    try:
        start = time.perf_counter()
        outcomes = session.evaluate(rows)
        return time.perf_counter() - start, outcomes
    finally:
        session.close()

