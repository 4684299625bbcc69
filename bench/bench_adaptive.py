"""`--geo-concurrency auto` against a rate-limited server and an unlimited one, with fixed
concurrencies beside it, in one run.

1. Limits R requests/s and C in flight (the fake server's rate-limit mode, headers like
   the real API's), latency L, `--calls` model calls (3 per GEO row): the throughput
   reached as a share of R (target >= 90%) and the share of requests answered 429
   (target <= 5%), for auto and for a fixed `--geo-concurrency 16`; and auto against
   the same limits when the server's 429s say only `Retry-After` (whole seconds) and its
   successes nothing (the same targets: the rate is learned between 429s).
2. No limit: auto's wall time against fixed C=64 (bench_concurrency.py's figure), on
   the same rows (target: auto within 20%).

Each run gets a fresh server process (a fresh token bucket), as bench_concurrency.py
runs its server: off the client's GIL. Engine path as the plugin's (`GeoSession`), the
real `openai` SDK, no cache.

    python bench/bench_adaptive.py [--calls 2000] [--rate 200] [--max-in-flight 100] [--latency 0.1]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

from common import PROMPTS, fake_server, kettle_rows, timed_evaluate  # the same rows as bench_concurrency.py

from pytest_geo.data.dataset import GeoRow
from pytest_geo.engine.session import GeoSession
from pytest_geo.settings import Settings

CALLS_PER_ROW = 3


def run(url: str, batch: list[GeoRow], concurrency: int | str) -> tuple[float, dict[str, Any], dict[str, Any]]:
    """(wall seconds, the session's concurrency stats, the server's stats)."""
    fixed = None if concurrency == "auto" else int(concurrency)
    session = GeoSession(Settings(prompts_dir=PROMPTS, base_url=url, use_cache=False, concurrency=fixed))
    elapsed, outcomes = timed_evaluate(session, batch)
    errors = [o.error for o in outcomes if o.error]
    if errors:
        print(f"  ({len(errors)} of {len(batch)} rows failed, e.g. {errors[0]})")
    with urllib.request.urlopen(f"{url}/stats") as response:
        served = json.load(response)
    return elapsed, session.concurrency_stats().as_json(), served


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rate", type=float, default=200)
    parser.add_argument("--max-in-flight", type=int, default=100)
    parser.add_argument("--latency", type=float, default=0.1)
    parser.add_argument("--unlimited-rows", type=int, default=400, help="rows of the no-limit comparison")
    parser.add_argument("--fixed", type=int, default=16, help="the fixed concurrency shown beside auto")
    parser.add_argument("--repeat", type=int, default=3, help="unlimited runs of each; the medians count")
    args = parser.parse_args()
    limits = ["--rate", str(args.rate), "--max-in-flight", str(args.max_in_flight)]
    with tempfile.TemporaryDirectory() as tmp:
        batch = kettle_rows(args.calls // CALLS_PER_ROW, Path(tmp))
        calls = len(batch) * CALLS_PER_ROW
        print(f"rate-limited server: R={args.rate:g}/s C={args.max_in_flight} L={args.latency:g}s, "
              f"{len(batch)} rows = {calls} calls (ideal wall {calls / args.rate:.2f}s at R; the bucket's "
              f"first second of burst makes {(calls - args.rate) / args.rate:.2f}s possible)")
        runs: list[tuple[int | str, list[str], str]] = [
            ("auto", limits, ""), (args.fixed, limits, ""),
            ("auto", [*limits, "--rate-headers", "retry-after"], " (server sends only Retry-After)")]
        for concurrency, server_limits, note in runs:
            with fake_server(args.latency, *server_limits) as url:
                run(url, batch[:4], 4)  # warm up imports and connections (inside the bucket's burst)
                wall, stats, served = run(url, batch, concurrency)
            throughput = calls / wall
            refused = served["rate_limited"]
            print(f"  --geo-concurrency {concurrency}{note}: wall {wall:.2f}s, {throughput:.0f} calls/s = "
                  f"{throughput / args.rate:.0%} of R (target >= 90%), 429s {refused} of {served['requests']} "
                  f"requests = {refused / max(1, served['requests']):.1%} (target <= 5%), "
                  f"rows in flight reached {stats['reached']}, ended at {stats['limit']}")
        unlimited = batch[: args.unlimited_rows]
        print(f"unlimited server: L={args.latency:g}s, {len(unlimited)} rows")
        walls: dict[str, list[float]] = {"64": [], "auto": []}
        for _ in range(args.repeat):  # alternated, so a busy spell of a shared machine hits both
            for concurrency in (64, "auto"):
                with fake_server(args.latency) as url:
                    run(url, unlimited[:8], 8)
                    wall, stats, _ = run(url, unlimited, concurrency)
                walls[str(concurrency)].append(wall)
                print(f"  --geo-concurrency {concurrency}: wall {wall:.2f}s, rows in flight reached "
                      f"{stats['reached']}, ended at {stats['limit']}")
        auto, fixed = statistics.median(walls["auto"]), statistics.median(walls["64"])
        print(f"  median wall: auto {auto:.2f}s, C=64 {fixed:.2f}s; auto / C=64: {auto / fixed:.2f}x "
              f"(target <= 1.20x)")


if __name__ == "__main__":
    main()
