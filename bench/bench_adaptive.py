"""`--geo-concurrency auto` against rate-limited, in-flight-capped and unlimited servers,
several trials of each, side by side in one run.

1. Limits R requests/s and C in flight (the fake server's rate-limit mode), latency L,
   `--calls` model calls (3 per GEO row), in three cases:
   - `headers`: the real API's `x-ratelimit-*` headers on every answer;
   - `retry-after`: the same limits, but the server's 429s say only `Retry-After` (whole
     seconds) and its successes nothing (the rate is learned between 429s);
   - `in-flight cap`: no rate, at most `--cap` requests in flight, beyond that a 429 with
     `Retry-After: 1` (a gateway or proxy bounding parallel requests): its allowed rate
     is cap / L. Each request also spends the client's own turnaround outside the
     server (more on a loaded machine), which no controller can fill, so its lines also
     give the server's occupancy: the admitted requests it held on average, over the cap.
   Each trial of each case prints the throughput as a share of the allowed rate (target
   >= 90%) and the share of requests answered 429 (target <= 5%); the last lines give the
   worst and the median over the trials. A fixed `--geo-concurrency 16` runs once beside
   them, against the `retry-after` limits.
   With `--tokens T` (T > 0), two more cases: a token limit of T tokens a second (a
   provider's tokens a minute, its minute scaled to a second as the requests' is, so
   the run outlasts the bucket's burst many times; no request limit), each request
   charged its prompt's tokens and its output cap, prompts of 2,000 to 6,000 tokens
   (a long query: it is in all three of a row's prompts), `--token-calls` calls at
   `--token-latency` seconds: `tokens, headers` (OpenAI's `x-ratelimit-*-tokens` on every
   answer) and `tokens, retry-after` (429s with `Retry-After` only). Each prints the
   share of the allowed tokens used (the tokens charged over the bucket's first fill
   plus T a second of the run; target >= 90%) and the share of requests refused
   (target <= 5%).
2. No limit: auto's wall time against fixed C=64 (bench_concurrency.py's figure), on the
   same rows (target: auto within 20%).

Trials alternate the cases, so a busy spell of the shared machine hits each. Each run gets
a fresh server process (a fresh token bucket), off the client's GIL. Engine path as the
plugin's (`GeoSession`, a hosted server's start: 16 rows), the real `openai` SDK, no cache.

`--trace` prints, after each limited auto run, the controller's DEBUG trace
(llm/adaptive.py's `trace` logger: each 429 episode's first refusal with the requests in
flight, its verdict, rate or cap, and the ceiling, resume level and granted rate it left;
each granted rate learned; the limits as they move) beside the server's bursts of 429s on
the same clock: how long the client took to read each burst's first 429, and how many
refusals each episode drew.

    python bench/bench_adaptive.py [--trials 5] [--calls 900] [--rate 100] [--max-in-flight 100] [--cap 8] [--latency 0.1]
                                   [--tokens 120000] [--token-calls 600] [--token-latency 1.0] [--trace]
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import json
import logging
import os
import random
import re
import statistics
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common import PROMPTS, fake_server, kettle_rows, timed_evaluate  # the same rows as bench_concurrency.py

from pytest_geo.data.dataset import GeoRow, iter_dataset
from pytest_geo.engine.session import GeoSession
from pytest_geo.llm import adaptive
from pytest_geo.settings import Settings

CALLS_PER_ROW = 3
PROMPT_TOKENS = (2_000, 6_000)  # a token case's prompts, tokens as the fake server counts them
TEMPLATE_TOKENS = 200  # about what the default prompts hold besides the query
RATE_TARGET = 0.90
REFUSED_TARGET = 0.05
EPISODE_GAP = 0.5  # seconds between the server's refusals that start another burst of them
_AT = re.compile(r" at (\d+\.\d+)")


class Trace(logging.Handler):
    """The controller's DEBUG lines (llm/adaptive.py's `trace`) of one run, kept in order."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    def __enter__(self) -> Trace:
        adaptive.trace.addHandler(self)
        adaptive.trace.setLevel(logging.DEBUG)
        return self

    def __exit__(self, *exc: object) -> None:
        adaptive.trace.removeHandler(self)
        adaptive.trace.setLevel(logging.NOTSET)

    def report(self, served: dict[str, Any]) -> None:
        """The client's episodes and limits beside the server's bursts of refusals, on one
        clock (time.monotonic is the machine's), from the controller's start: for each
        burst, how long the client took to read its first 429 and how many requests the
        server had taken in the second before it; for each episode, the refusals it drew."""
        timed = [(float(m.group(1)), line) for line in self.lines for m in [_AT.search(line)] if m]
        if not timed:
            return
        start = timed[0][0]  # the controller's first limits
        read = sorted(at for at, line in timed if line.startswith("429"))
        arrived, bursts = sorted(served["arrived_at"]), _bursts(sorted(served["refused_at"]))
        for number, burst in enumerate(bursts, 1):
            after = bisect.bisect_left(read, burst[0])
            seen = f"{(read[after] - burst[0]) * 1000:.0f} ms later" if after < len(read) else "never"
            before = bisect.bisect_left(arrived, burst[0]) - bisect.bisect_left(arrived, burst[0] - 1.0)
            print(f"    server burst {number} at +{burst[0] - start:.3f}s: {len(burst)} refused over "
                  f"{(burst[-1] - burst[0]) * 1000:.0f} ms; the client read its first 429 {seen}; "
                  f"{before} requests arrived in the second before it")
        refusals = [int(m.group(1)) for line in self.lines for m in [re.search(r"episode (\d+), refusal", line)] if m]
        for line in self.lines:
            if ", refusal 1," in line or not line.startswith("429"):
                episode = re.search(r"episode (\d+)", line)
                drew = f" [{refusals.count(int(episode.group(1)))} refusals]" if episode else ""
                print("    " + _AT.sub(lambda m: f" at +{float(m.group(1)) - start:.3f}s", line, count=1) + drew)


def _bursts(refused: list[float]) -> list[list[float]]:
    """The server's refusals in bursts: a gap of EPISODE_GAP seconds starts another."""
    bursts: list[list[float]] = []
    for at in refused:
        if bursts and at - bursts[-1][-1] < EPISODE_GAP:
            bursts[-1].append(at)
        else:
            bursts.append([at])
    return bursts


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


def long_prompt_rows(n: int, directory: Path, seed: int = 0) -> list[GeoRow]:
    """n kettle rows whose queries make each of a row's prompts PROMPT_TOKENS long (uniform)."""
    path, rng = directory / "long.jsonl", random.Random(seed)
    with path.open("w", encoding="utf-8") as handle:
        for i, row in enumerate(kettle_rows(n, directory)):
            filler = " ".join(["context"] * (rng.randint(*PROMPT_TOKENS) - TEMPLATE_TOKENS))
            handle.write(json.dumps({"query_id": f"r{i}", "query": f"{row.query} {filler}", "target_id": row.target_id,
                                     "candidates": [c.as_dict() for c in row.candidates]}) + "\n")
    return [r for r in iter_dataset(path, 0) if isinstance(r, GeoRow)]


@dataclass
class Case:
    name: str
    server: list[str]  # the fake server's limit flags
    allowed: float  # requests (a token case: tokens) per second the limits allow
    rates: list[float]  # per trial: throughput / allowed
    refused: list[float]  # per trial: 429s / requests
    cap: int = 0  # the in-flight cap case's cap (0: a rate limit)
    tokens: bool = False  # a token limit: the share is of the tokens allowed


def limited_run(case: Case, latency: float, batch: list[GeoRow], concurrency: int | str,
                trace: bool = False) -> tuple[float, float]:
    with fake_server(latency, *case.server) as url:
        run(url, batch[:4], 4)  # warm up imports and connections (4 requests: within every limit)
        with Trace() if trace else contextlib.nullcontext() as traced:
            wall, stats, served = run(url, batch, concurrency)
    calls = len(batch) * CALLS_PER_ROW
    share, refused = calls / wall / case.allowed, served["rate_limited"] / max(1, served["requests"])
    if case.tokens:  # the bucket was full after the warm-up: one second's tokens, then T a second
        share = served["charged_tokens"] / (case.allowed * (1 + wall))
        print(f"  {case.name}: {served['charged_tokens']} tokens charged = {share:.0%} of the "
              f"{case.allowed * (1 + wall):.0f} allowed in {wall:.2f}s; of the 429s "
              f"{served['refused_for_tokens']} for tokens")
    occupancy = f", occupancy {served['busy_seconds'] / wall / case.cap:.0%} of the cap" if case.cap else ""
    print(f"  {case.name}, --geo-concurrency {concurrency}: wall {wall:.2f}s, {calls / wall:.0f} calls/s = "
          f"{share:.0%} of {case.allowed:g}/s, 429s {served['rate_limited']} of {served['requests']} requests = "
          f"{refused:.1%}, rows in flight reached {stats['reached']}, ended at {stats['limit']}; "
          f"server saw at most {served['max_in_flight']} in flight{occupancy}; load {os.getloadavg()[0]:.1f}")
    if traced is not None:
        traced.report(served)
    return share, refused


def summary(case: Case) -> str:
    worst_rate, worst_refused = min(case.rates), max(case.refused)
    met = worst_rate >= RATE_TARGET and worst_refused <= REFUSED_TARGET
    return (f"  {case.name:<14} rate share worst {worst_rate:.0%}, median {statistics.median(case.rates):.0%} "
            f"(target >= {RATE_TARGET:.0%}); refused worst {worst_refused:.1%}, median "
            f"{statistics.median(case.refused):.1%} (target <= {REFUSED_TARGET:.0%}): "
            f"{'met' if met else 'MISSED'} in {len(case.rates)} trials")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=5, help="runs of each limited case")
    parser.add_argument("--calls", type=int, default=900)
    parser.add_argument("--rate", type=float, default=100)
    parser.add_argument("--max-in-flight", type=int, default=100)
    parser.add_argument("--cap", type=int, default=8, help="the in-flight cap case's requests in flight")
    parser.add_argument("--latency", type=float, default=0.1)
    parser.add_argument("--cases", default="headers,retry-after,in-flight cap", help="limited cases to run")
    parser.add_argument("--sliding", type=lambda t: [float(x) for x in t.split(",") if x], default=[20.0, 100.0, 500.0],
                        help="rates R of the sliding-window cases (at most R requests in any second, 429s "
                             "with `Retry-After: 0.2` and no rate headers); empty: none")
    parser.add_argument("--tokens", type=float, default=120_000,
                        help="the token cases' limit, tokens a second (0: no token cases)")
    parser.add_argument("--token-calls", type=int, default=600)
    parser.add_argument("--token-latency", type=float, default=1.0,
                        help="the token cases' latency: long prompts take longer")
    parser.add_argument("--fixed", type=int, default=16, help="the fixed concurrency run once beside auto (0: none)")
    parser.add_argument("--unlimited-rows", type=int, default=400, help="rows of the no-limit comparison (0: none)")
    parser.add_argument("--repeat", type=int, default=3, help="unlimited runs of each; the medians count")
    parser.add_argument("--trace", action="store_true",
                        help="print each limited auto run's 429 episodes, limits and the server's bursts of 429s")
    args = parser.parse_args()
    limits = ["--rate", str(args.rate), "--max-in-flight", str(args.max_in_flight)]
    retry_after = ["--rate-headers", "retry-after"]
    every = [Case("headers", limits, args.rate, [], []),
             Case("retry-after", [*limits, *retry_after], args.rate, [], []),
             Case("in-flight cap", ["--max-in-flight", str(args.cap), *retry_after], args.cap / args.latency, [], [],
                  args.cap)]
    every += [Case(f"sliding R={r:g}", ["--rate", str(r), "--max-in-flight", str(args.max_in_flight), *retry_after,
                                        "--window", "sliding", "--retry-after", "0.2"], r, [], [])
              for r in args.sliding]
    if args.tokens:
        every += [Case(f"tokens, {kind}", ["--tokens", str(args.tokens), "--rate-headers", kind], args.tokens, [], [],
                       tokens=True) for kind in ("openai", "retry-after")]
    cases = [c for c in every if c.name in args.cases.split(",") or c.name.startswith(("sliding", "tokens"))]
    print(f"load average at start: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    with tempfile.TemporaryDirectory() as tmp:
        batch = kettle_rows(args.calls // CALLS_PER_ROW, Path(tmp))
        calls = len(batch) * CALLS_PER_ROW
        print(f"limited servers: R={args.rate:g}/s C={args.max_in_flight} (in-flight cap case: {args.cap}, "
              f"Retry-After: 1), L={args.latency:g}s, {len(batch)} rows = {calls} calls (at R the ideal wall is "
              f"{calls / args.rate:.2f}s; the bucket's first second of burst makes "
              f"{calls / (calls - args.rate):.0%} of R possible)")
        long_rows = long_prompt_rows(args.token_calls // CALLS_PER_ROW, Path(tmp)) if args.tokens else []
        if long_rows:
            print(f"token servers: {args.tokens:g} tokens/s (a minute's limit scaled to a second), "
                  f"L={args.token_latency:g}s, {len(long_rows)} rows = {len(long_rows) * CALLS_PER_ROW} calls of "
                  f"{PROMPT_TOKENS[0]:,} to {PROMPT_TOKENS[1]:,} prompt tokens")
        for trial in range(args.trials):
            print(f"trial {trial + 1} of {args.trials}")
            for case in cases:
                rows, latency = (long_rows, args.token_latency) if case.tokens else (batch, args.latency)
                share, refused = limited_run(case, latency, rows, "auto", args.trace)
                case.rates.append(share)
                case.refused.append(refused)
        if args.fixed:
            limited_run(every[1], args.latency, batch, args.fixed)
        print("auto over the trials:")
        for case in cases:
            print(summary(case))
        if not args.unlimited_rows:
            return
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
                      f"{stats['reached']}, ended at {stats['limit']}; load {os.getloadavg()[0]:.1f}")
        auto, fixed = statistics.median(walls["auto"]), statistics.median(walls["64"])
        print(f"  median wall: auto {auto:.2f}s, C=64 {fixed:.2f}s; auto / C=64: {auto / fixed:.2f}x "
              f"(target <= 1.20x)")


if __name__ == "__main__":
    main()
