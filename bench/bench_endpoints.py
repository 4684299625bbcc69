"""Five endpoints with five different limits at once, one judge each, through the real
client stacks (llm/stack.py: one concurrency controller per endpoint) and the real SDK.

Five loopback servers (tests/fake_openai.py, each in its own process) stand for five
provider accounts, each limited its own way (requests or tokens a second, a second
standing for a provider's minute as in bench_adaptive.py; with OpenAI's rate headers or
`Retry-After` only); a sixth, unlimited, serves the rewriter. Each judge has a ranker
system prompt of its own size (E-GEO's carry thousands of tokens), so the token limits
bind. Each row calls every judge twice (before and after its rewrite), so every
endpoint serves the same calls and the limits are chosen so their floors (an endpoint's
work over its limit, less the one second its bucket holds at the start) lie within
about 10% of each other: an endpoint whose floor is far below the slowest's cannot be
held near its limit for the whole run whatever the client does, since a row waits for
every judge.

Printed per endpoint: the work it admitted (requests, or tokens charged), the share of
its limit held over the run (the work over the limit's first second plus a second's
worth for every second of the run; target >= 90%), the share of its requests refused,
and its floor; then the run's wall time over the slowest floor (target <= 1.15x).

The servers stand for hosted providers, so each endpoint's controller starts where a
hosted one does (16 rows; `--local-start`: at 1 row, as a loopback server's would).

    python bench/bench_endpoints.py [--rows 1000] [--latency 1.0] [--local-start]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common import PROMPTS, fake_server, kettle_rows, timed_evaluate

from pytest_geo.engine.session import GeoSession
from pytest_geo.judge import Judge
from pytest_geo.llm import stack
from pytest_geo.llm.endpoints import Endpoint
from pytest_geo.settings import DEFAULT_CONCURRENCY, Settings

HELD_TARGET = 0.90
WALL_TARGET = 1.15
JUDGE_OUTPUT_CAP = 500  # each judge's max_output_tokens: a token limit charges it with the prompt


@dataclass
class Limit:
    name: str
    server: list[str]  # the fake server's limit flags
    requests: float | None  # requests a second (None: none)
    tokens: float | None  # tokens a second (None: none)
    system_tokens: int  # filler words in the judge's system prompt
    says: str  # how it answers: rate headers or Retry-After only


LIMITS = [
    Limit("e1", ["--rate", "20"], 20, None, 0, "request headers"),
    Limit("e2", ["--rate", "20.5", "--rate-headers", "retry-after"], 20.5, None, 0, "Retry-After only"),
    Limit("e3", ["--tokens", "60000"], None, 60_000, 2_300, "token headers"),
    Limit("e4", ["--tokens", "100000", "--rate-headers", "retry-after"], None, 100_000, 4_300, "Retry-After only"),
    Limit("e5", ["--rate", "30", "--tokens", "115000"], 30, 115_000, 5_000, "request and token headers"),
]


def judge_system(limit: Limit, directory: Path) -> Path | None:
    """The default ranker system prompt with `system_tokens` words of background first."""
    if not limit.system_tokens:
        return None
    path = directory / f"{limit.name}_system.txt"
    background = " ".join(["background"] * limit.system_tokens)
    path.write_text(f"Background: {background}\n\n" + (PROMPTS / "ranker_system.txt").read_text(encoding="utf-8"),
                    encoding="utf-8")
    return path


def stats(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{url}/stats") as response:
        served: dict[str, Any] = json.load(response)
    return served


def held(limit: Limit, served: dict[str, Any], wall: float) -> tuple[float, float, str]:
    """(share of the binding limit held over the run, that limit's floor in seconds, what it counts)."""
    shares = []
    if limit.requests is not None:
        admitted = served["requests"] - served["rate_limited"]
        shares.append((admitted / (limit.requests * (1 + wall)), admitted / limit.requests - 1, "requests"))
    if limit.tokens is not None:
        charged = served["charged_tokens"]
        shares.append((charged / (limit.tokens * (1 + wall)), charged / limit.tokens - 1, "tokens"))
    return max(shares)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--latency", type=float, default=1.0, help="every server's latency (long prompts)")
    parser.add_argument("--local-start", action="store_true",
                        help="start each endpoint at 1 row, as a loopback server's (default: as a hosted one's)")
    args = parser.parse_args()
    if not args.local_start:
        stack.LOCAL_START_CONCURRENCY = DEFAULT_CONCURRENCY  # the servers stand for hosted providers
    print(f"load average at start: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as servers:
        directory = Path(tmp)
        rows = kettle_rows(args.rows, directory)
        urls = [servers.enter_context(fake_server(args.latency, *limit.server)) for limit in LIMITS]
        rewriter = servers.enter_context(fake_server(args.latency))
        settings = Settings(
            prompts_dir=PROMPTS, base_url=rewriter, use_cache=False,
            endpoints={limit.name: Endpoint(limit.name, url) for limit, url in zip(LIMITS, urls, strict=True)},
            judges=[Judge(f"judge-{limit.name}", f"{limit.name}/judge", system=judge_system(limit, directory),
                          max_output_tokens=JUDGE_OUTPUT_CAP) for limit in LIMITS])
        print(f"{len(rows)} rows: 2 calls a row to each of {len(LIMITS)} judges' endpoints, 1 to the rewriter's "
              f"(unlimited); L={args.latency:g}s everywhere; limits a second (a provider's minute scaled to a second)")
        session = GeoSession(settings)
        wall, outcomes = timed_evaluate(session, rows)
        errors = [o.error for o in outcomes if o.error]
        if errors:
            print(f"  ({len(errors)} of {len(rows)} rows failed, e.g. {errors[0]})")
        floors, shares = [], []
        for limit, url in zip(LIMITS, urls, strict=True):
            served = stats(url)
            share, floor, counted = held(limit, served, wall)
            floors.append(floor)
            shares.append(share)
            rate = limit.tokens if counted == "tokens" else limit.requests
            print(f"  {limit.name} ({rate:g} {counted}/s, {limit.says}, judge prompt +{limit.system_tokens} tokens): "
                  f"held {share:.0%} of its limit over the run; 429s {served['rate_limited']} of "
                  f"{served['requests']} requests = {served['rate_limited'] / max(1, served['requests']):.1%}; "
                  f"floor {floor:.1f}s; at most {served['max_in_flight']} in flight")
        slowest = max(floors)
        print(f"  wall {wall:.1f}s over the slowest floor {slowest:.1f}s: {wall / slowest:.2f}x "
              f"(target <= {WALL_TARGET}x); held worst {min(shares):.0%} (target >= {HELD_TARGET:.0%}); "
              f"load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
