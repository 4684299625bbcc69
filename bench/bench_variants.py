"""Comparing V rewriting strategies: one run with V variants (`--geo-variant`, rank_before
shared per row) against V separate runs (one per strategy), side by side in one process.

Runs the engine directly (`GeoSession`, the code path the plugin uses) with the real
`openai` SDK and no cache, against the fake OpenAI server (latency L per call) in its own
process, so it does not share the client's GIL. Prints, per V, the server's request
count and the median wall time of each way, and their ratios. Calls per row: 1 + 2V in one run,
3V in separate runs; the ratio tends to 2/3 as V grows.

    python bench/bench_variants.py [--rows 200] [--latency 0.05] [--concurrency 32] [--variants 1 3 5] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import urllib.request
from dataclasses import replace
from pathlib import Path

from common import PROMPTS, fake_server, kettle_rows, timed_evaluate

from pytest_geo.data.dataset import GeoRow
from pytest_geo.engine.session import GeoSession
from pytest_geo.settings import Settings


def strategies(v: int, directory: Path) -> dict[str, Path]:
    """V rewriter templates that differ in their first line (the fake server answers all alike)."""
    user = (PROMPTS / "rewriter_user.txt").read_text(encoding="utf-8")
    paths = {}
    for i in range(v):
        paths[f"s{i}"] = directory / f"s{i}.txt"
        paths[f"s{i}"].write_text(f"Strategy {i}.\n{user}", encoding="utf-8")
    return paths


def requests(url: str) -> int:
    with urllib.request.urlopen(f"{url}/stats") as response:
        count: int = json.load(response)["requests"]
    return count


def run(url: str, rows: list[GeoRow], variants: dict[str, Path], concurrency: int) -> tuple[int, float]:
    """(requests, wall seconds) of one run over `rows` with `variants`."""
    settings = Settings(prompts_dir=PROMPTS, base_url=url, concurrency=concurrency, use_cache=False,
                        variants=variants)
    jobs = [replace(row, variant=name) for row in rows for name in variants]
    before = requests(url)
    elapsed, outcomes = timed_evaluate(GeoSession(settings), jobs)
    errors = [o.error for o in outcomes if o.error]
    if errors:
        raise SystemExit(f"{len(errors)} rows failed, e.g. {errors[0]}")
    return requests(url) - before, elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=200)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--variants", type=int, nargs="+", default=[1, 3, 5])
    parser.add_argument("--repeat", type=int, default=3, help="runs of each way; the median wall counts")
    args = parser.parse_args()
    with fake_server(args.latency) as url:
        with tempfile.TemporaryDirectory() as tmp:
            rows = kettle_rows(args.rows, Path(tmp))
            templates = strategies(max(args.variants), Path(tmp))
            run(url, rows[:8], {"s0": templates["s0"]}, args.concurrency)  # warm up imports and connections
            print(f"N={args.rows} rows, L={args.latency:g}s per call, C={args.concurrency} rows in flight, no cache")
            for v in args.variants:
                chosen = dict(list(templates.items())[:v])
                ones, seps = [], []
                for _ in range(args.repeat):  # interleaved, so both ways see the same machine load
                    ones.append(run(url, rows, chosen, args.concurrency))
                    separate = [run(url, rows, {name: path}, args.concurrency) for name, path in chosen.items()]
                    seps.append((sum(c for c, _ in separate), sum(w for _, w in separate)))
                one_calls, one_wall = ones[0][0], statistics.median(w for _, w in ones)
                sep_calls, sep_wall = seps[0][0], statistics.median(w for _, w in seps)
                print(f"V={v}: one run {one_calls} calls ({one_calls / args.rows:.0f}/row) {one_wall:.2f}s | "
                      f"{v} separate runs {sep_calls} calls ({sep_calls / args.rows:.0f}/row) {sep_wall:.2f}s | "
                      f"calls {one_calls / sep_calls:.2f}x, wall {one_wall / sep_wall:.2f}x")


if __name__ == "__main__":
    main()
