"""Wall time of N rows against the fake OpenAI server (latency L per call) at concurrency
C and sequentially, against the ideal ceil(N/C) * 2L (rank_before and the rewrite
overlap, then rank_after).

Then `--geo-concurrency auto` as a run against this loopback server gets it (a local
server's defaults: one row at first, growing while calls come back as fast), beside C:
its median wall time and the most rows it allowed in flight (the bound of 8 rows a local
server had would make it at least ceil(N/8) * 2L).

Runs the engine directly (`GeoSession.evaluate`, the code path the plugin uses), the real
`openai` SDK, no cache. The server runs in its own process so it does not share the
client's GIL. C bounds rows in flight, as in the ideal; a row makes at most two calls at
once, so the server sees at most 2C requests in flight (printed from its /stats).

    python bench/bench_concurrency.py [--rows 400] [--latency 0.1] [--concurrency 64] [--sequential-rows 40] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import tempfile
import urllib.request
from pathlib import Path

from common import PROMPTS, fake_server, kettle_rows, timed_evaluate

from pytest_geo.data.dataset import GeoRow
from pytest_geo.engine.session import GeoSession
from pytest_geo.settings import Settings, build_settings


def run(url: str, batch: list[GeoRow], concurrency: int | None, reached: list[int] | None = None) -> float:
    """Wall seconds; `concurrency` None is auto with the settings a run against `url`
    gets (build_settings: a loopback server's defaults), whose most rows allowed in
    flight go to `reached`."""
    if concurrency is None:
        settings = build_settings({"prompts_dir": PROMPTS, "base_url": url, "use_cache": False})
    else:
        settings = Settings(prompts_dir=PROMPTS, base_url=url, concurrency=concurrency, use_cache=False)
    session = GeoSession(settings)
    elapsed, outcomes = timed_evaluate(session, batch)
    errors = [o.error for o in outcomes if o.error]
    if errors:
        raise SystemExit(f"{len(errors)} rows failed, e.g. {errors[0]}")
    if reached is not None:
        reached.append(session.concurrency_stats().reached)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=400)
    parser.add_argument("--latency", type=float, default=0.1)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--sequential-rows", type=int, default=40, help="rows for the C=1 run (scaled to --rows)")
    parser.add_argument("--repeat", type=int, default=3, help="concurrent runs; the median counts")
    args = parser.parse_args()
    with fake_server(args.latency) as url:
        with tempfile.TemporaryDirectory() as tmp:
            batch = kettle_rows(args.rows, Path(tmp))
            n, c, latency = args.rows, args.concurrency, args.latency
            run(url, batch[: min(8, n)], c)  # warm up imports and connections
            walls = sorted(run(url, batch, c) for _ in range(args.repeat))
            concurrent = statistics.median(walls)
            ideal = math.ceil(n / c) * 2 * latency
            print(f"N={n} L={latency:g}s C={c}: wall {concurrent:.2f}s (median of {', '.join(f'{w:.2f}' for w in walls)}), "
                  f"ideal {ideal:.2f}s, ratio {concurrent / ideal:.2f}x (target <= 1.5x)")
            with urllib.request.urlopen(f"{url}/stats") as response:
                stats = json.load(response)
            print(f"server, over all runs: {stats['requests']} requests, at most {stats['max_in_flight']} in flight "
                  f"(bound 2C = {2 * c})")
            reached: list[int] = []
            autos = sorted(run(url, batch, None, reached) for _ in range(args.repeat))
            auto = statistics.median(autos)
            print(f"auto, a local server's start (1 row): wall {auto:.2f}s (median of "
                  f"{', '.join(f'{w:.2f}' for w in autos)}), {auto / concurrent:.2f}x C={c}; rows in flight reached "
                  f"{', '.join(map(str, reached))} (a bound of 8 rows: at least {math.ceil(n / 8) * 2 * latency:.2f}s)")
            m = min(args.sequential_rows, n)
            sequential = run(url, batch[:m], 1)
            ideal_seq = m * 2 * latency
            print(f"N={m} L={latency:g}s C=1: wall {sequential:.2f}s, ideal {ideal_seq:.2f}s, "
                  f"ratio {sequential / ideal_seq:.2f}x; scaled to N={n}: {sequential * n / m:.1f}s")
            print(f"speed-up at C={c}: {sequential * n / m / concurrent:.1f}x")


if __name__ == "__main__":
    main()
