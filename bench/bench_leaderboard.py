"""The E-GEO leaderboard's full run, simulated: 2,000 test queries of 10 products, its five
judges (before-rankings from their caches, as the benchmark runs: each row asks the
rewriter once and each judge `rank_after` once), one rewriter, each judge on an
endpoint of its own, run as a user runs it (`pytest --geo-dataset data/test_data.json`,
auto concurrency, no answer cache) against loopback servers (tests/fake_openai.py, one
process each) that hold published limits of real accounts. Prints the run's wall time and
its own cost line (list prices, bench_egeo_plan.py's geo_prices) beside E-GEO's stated
1-3 hours and $230, and each endpoint's held share of its limit.

The limits a server holds (a minute's, from each provider's own pages; see LIMITS):
- gpt-5: OpenAI Tier 2, 5,000 requests and 1,000,000 tokens a minute, OpenAI's headers;
- claude-sonnet-4.5: Anthropic Tier 2 (Sonnet 4.x), 1,000 requests and 450,000 input
  tokens a minute; its headers are Anthropic's own, which the client does not read, so
  the server says `Retry-After` only (output tokens, 90,000 a minute, do not bind at a
  100-token cap and are not modelled);
- gemini-3-flash-preview: Gemini API Tier 1, 1,000 requests and 1,000,000 tokens a minute
  (Gemini 2.5 Flash's published Tier 1 figures; Google shows a preview model's in AI
  Studio per project), `Retry-After` only;
- deepseek-v3.2: DeepSeek's own API, which sets no rate limit;
- llama-4-maverick: OpenRouter, a paid model, no account limit (only free models and
  DDoS protection are limited);
- the rewriter, gpt-4.1: OpenAI Tier 2, 5,000 requests and 450,000 tokens a minute, on an
  endpoint of its own (OpenAI limits each model apart; two geo_endpoints naming one URL).

Time is compressed by `--factor` (10: a provider's minute held in 6 s, every latency
divided by 10), so the run takes about 3 minutes here; wall times are printed as
measured and scaled back (the span from the first request to the last answer times the
factor, plus the run's start-up and exit unscaled). At 20x the client's own CPU (about
15 ms a row in mock mode, the SDK's and the servers' besides) outgrew this 2-core
machine's share: the span was 2.5x the slowest floor at load 7.8. Each server's token
bucket holds one second's worth (a sixth of a minute's at 10x): stricter than a
provider's minute.
Latencies (real seconds, assumed): gpt-5 15 (reasoning), Claude 3, Gemini 2, DeepSeek 5,
Llama 1.5, gpt-4.1 6 (500 tokens out). Sizes as bench_egeo_plan.py assumes: products of
about 1,000 characters, judge system prompts of about 3,000 tokens. The fake server's
answers are short (no reasoning tokens), so the cost line is mostly input; the plan
(bench_egeo_plan.py) prices output at the caps, the worst case.

    python bench/bench_leaderboard.py [--queries 2000] [--factor 10] [--system-tokens 3000]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench_egeo_plan import EGEO_DOLLARS, REWRITER, write_data, write_project
from bench_endpoints import stats
from common import fake_server

EGEO_HOURS = (1, 3)  # the benchmark's stated wall time of a full run


@dataclass
class Account:
    """One endpoint's server: the limits a minute of the account it stands for."""

    judge: str  # the judge's name in bench_egeo_plan.JUDGES ("rewriter": the rewriter)
    model: str  # the model sent (bench_egeo_plan.LIST_PRICES' key)
    stands_for: str
    requests: float | None  # a minute (None: none)
    tokens: float | None  # a minute (None: none)
    headers: str  # "openai" or "retry-after"
    latency: float  # real seconds, assumed

    def limit_flags(self, factor: float) -> list[str]:
        """The fake server's flags for these limits, a minute held in 60 / factor seconds."""
        flags = []
        if self.requests is not None:
            flags += ["--rate", f"{self.requests / 60 * factor:g}"]
        if self.tokens is not None:
            flags += ["--tokens", f"{self.tokens / 60 * factor:g}"]
        if self.requests is not None or self.tokens is not None:
            flags += ["--rate-headers", self.headers]
        return flags


LIMITS = [
    Account("gpt5", "gpt-5", "OpenAI Tier 2 gpt-5", 5_000, 1_000_000, "openai", 15.0),
    Account("claude", "anthropic/claude-sonnet-4.5", "Anthropic Tier 2 Sonnet 4.x (input tokens)",
            1_000, 450_000, "retry-after", 3.0),
    Account("gemini", "google/gemini-3-flash-preview", "Gemini API Tier 1 (2.5 Flash's figures)",
            1_000, 1_000_000, "retry-after", 2.0),
    Account("deepseek", "deepseek/deepseek-v3.2", "DeepSeek's API (no rate limit)", None, None, "openai", 5.0),
    Account("llama", "meta-llama/llama-4-maverick", "OpenRouter, paid model (no account limit)",
            None, None, "openai", 1.5),
    Account("rewriter", REWRITER[0].split("/", 1)[1], "OpenAI Tier 2 gpt-4.1", 5_000, 450_000, "openai", 6.0),
]
# The servers stand for hosted providers: each endpoint's controller starts as a hosted one's.
CONFTEST = "import pytest_geo.llm.stack as stack\n\nstack.LOCAL_START_CONCURRENCY = 16\n"


def held(account: Account, served: dict[str, float], span: float, factor: float) -> tuple[str, float]:
    """(what the binding limit counts, share of it held over `span` seconds), that limit's
    first bucket plus a second's worth for every second; ("", 0) without a limit."""
    shares = []
    if account.requests is not None:
        admitted = served["requests"] - served["rate_limited"]
        shares.append((admitted / (account.requests / 60 * factor * (1 + span)), "requests"))
    if account.tokens is not None:
        shares.append((served["charged_tokens"] / (account.tokens / 60 * factor * (1 + span)), "tokens"))
    if not shares:
        return "", 0.0
    share, counted = max(shares)
    return counted, share


def floor(account: Account, served: dict[str, float], factor: float) -> float:
    """The account's own floor in compressed seconds: its work over its limit, less the
    first second the bucket holds; 0 without a limit."""
    floors = [0.0]
    if account.requests is not None:
        floors.append((served["requests"] - served["rate_limited"]) / (account.requests / 60 * factor) - 1)
    if account.tokens is not None:
        floors.append(served["charged_tokens"] / (account.tokens / 60 * factor) - 1)
    return max(floors)


def run(directory: Path) -> tuple[float, float, list[str]]:
    """`pytest` on the E-GEO project: (wall seconds, its start as time.time(), its output's lines)."""
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--geo-dataset",
               "data/test_data.json", "--geo-no-cache", "--geo-rewriter-model", f"rewriter/{LIMITS[-1].model}",
               "--geo-max-output-tokens", str(REWRITER[1])]
    env = {**os.environ, "OPENAI_API_KEY": "sk-bench-dummy"}
    env.pop("OPENAI_BASE_URL", None)
    start, started = time.perf_counter(), time.time()
    done = subprocess.run(command, cwd=directory, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    lines = done.stdout.splitlines()
    if done.returncode not in (0, 1):
        sys.exit(f"pytest failed ({done.returncode}):\n{done.stdout[-4000:]}\n{done.stderr[-2000:]}")
    return wall, started, lines


def report(served: list[dict[str, float]], wall: float, started: float, lines: list[str], factor: float) -> None:
    """Each endpoint's share and refusals, the wall times scaled back, the cost line."""
    first = min(s["first_request_at"] for s in served if s["first_request_at"])
    last = max(s["last_answer_at"] for s in served if s["last_answer_at"])
    span = last - first
    floors = []
    for account, one in zip(LIMITS, served, strict=True):
        counted, share = held(account, one, span, factor)
        floors.append(floor(account, one, factor))
        limit = (f"held {share:.0%} of its {counted} limit" if counted else "no limit")
        print(f"  {account.judge:8} {account.model} ({account.stands_for}): {one['requests']} requests, "
              f"{one['rate_limited']} refused ({one['rate_limited'] / max(1, one['requests']):.1%}), "
              f"{one['prompt_tokens'] / max(1, one['requests'] - one['rate_limited']):,.0f} prompt tokens a call; {limit}; "
              f"floor {floors[-1]:.1f}s; at most {one['max_in_flight']} in flight")
    slowest = max(floors)
    real = span * factor + (wall - span)
    print(f"  span first request to last answer {span:.1f}s = {span / slowest:.2f}x the slowest floor "
          f"{slowest:.1f}s; wall {wall:.1f}s here (start-up to the first request {first - started:.1f}s, "
          f"last answer to exit {started + wall - last:.1f}s)")
    print(f"  scaled back x{factor:g}: {real / 60:.0f} minutes ({real / 3600:.2f} h) against E-GEO's "
          f"{EGEO_HOURS[0]}-{EGEO_HOURS[1]} hours")
    cost = [line.strip(" =") for line in lines if "cost:" in line]
    outcome = [line for line in lines if line.rstrip().endswith(("s", ")")) and " passed" in line]
    print(f"  the run's {cost[-1] if cost else 'cost line: not found'} against E-GEO's ${EGEO_DOLLARS}")
    if outcome:
        print(f"  pytest: {outcome[-1].strip(' =')}")
    print(f"  load {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queries", type=int, default=2000)
    parser.add_argument("--factor", type=float, default=10.0, help="a provider's minute held in 60/factor seconds")
    parser.add_argument("--system-tokens", type=int, default=3000, help="each judge's system prompt, about")
    parser.add_argument("--product-chars", type=int, default=1000, help="each product's text, about")
    args = parser.parse_args()
    print(f"load average at start: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as servers:
        directory = Path(tmp)
        urls = [servers.enter_context(fake_server(a.latency / args.factor, *a.limit_flags(args.factor))) for a in LIMITS]
        write_data(directory / "data", args.queries, args.product_chars)
        endpoints = "geo_endpoints =\n" + "".join(f"    {a.judge} = {url}\n" for a, url in zip(LIMITS, urls, strict=True))
        write_project(directory, args.system_tokens, {},
                      models={a.judge: f"{a.judge}/{a.model}" for a in LIMITS}, extra=endpoints)
        (directory / "conftest.py").write_text(CONFTEST, encoding="utf-8")
        print(f"E-GEO leaderboard run simulated: {args.queries} queries, 5 judges (before-rankings cached) and "
              f"1 rewriter, each on its own endpoint; products ~{args.product_chars} chars, judge system prompts "
              f"~{args.system_tokens} tokens; limits a minute held in {60 / args.factor:g}s (x{args.factor:g})")
        wall, started, lines = run(directory)
        report([stats(url) for url in urls], wall, started, lines, args.factor)


if __name__ == "__main__":
    main()
