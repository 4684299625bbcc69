"""Client CPU per model call, all in, and where it goes: side by side in one run.

Issue #24's target: client CPU all in, per call, at most 1.5 ms (process CPU less
start-up, over calls). Rows of 10 candidates (common.py's decoy rows), the fake server in its
own process (its CPU is not counted), the answer cache on (a fresh directory each run, so
every call writes an entry).

All in, in fresh processes: `pytest` and `egeo evaluate` over N rows and over 1 row; the
CPU of the N-row run less the 1-row run's (start-up, imports, collection of one row,
reports), over the calls the extra rows made.

In this process, alternated, medians of --repeat:
  whole    the engine as the plugin runs it (`GeoSession.evaluate`) over the real SDK and HTTP;
  sdk      the very requests `whole` sent, replayed through `OpenAIChatClient` alone at the
           same concurrency: the SDK, its aiohttp transport and our thin client;
  ours     the engine over an in-process client that hands back `whole`'s answers at once:
           everything pytest-geo does per call, without the SDK or HTTP;
  layers   the client stack without its cache (usage, healing, breaker, request slots) over
           that client, called directly with the recorded requests, less the client alone;
  budget   the same with --geo-budget-tokens set (its ledger is a locked file, as under
           the plugin), less `layers`: what a budget adds when one is set.
`ours` is split further by timing, on the runner's thread (`time.thread_time`), the
functions the engine calls for each call: the answer cache (key, lookup, append), prompt
rendering, answer parsing (with the size and cap checks), the fact check; what is left of
`ours` after them and the layers is the scheduler and engine glue (runner, session, rows
in flight, `ask`, transcripts). That timed run is a separate run of `ours`.

    python bench/bench_client_cpu.py [--rows 600] [--concurrency 32] [--latency 0.02] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from common import PROMPTS, fake_server, write_decoy_dataset

import pytest_geo.engine.experiment as experiment
import pytest_geo.llm.cache as cache
from pytest_geo.data.dataset import GeoRow, iter_dataset
from pytest_geo.engine.session import GeoSession
from pytest_geo.llm.base import ChatRequest, ChatResponse
from pytest_geo.llm.factory import sdk_client_class
from pytest_geo.llm.ledger import Ledger
from pytest_geo.llm.stack import build_stack
from pytest_geo.settings import Settings

OpenAIChatClient = sdk_client_class()  # imported as a run imports it (llm/factory.py: the GC frozen after)
TARGET_US = 1500
PASSES = 5


def _key(request: ChatRequest) -> str:
    return json.dumps([dict(m) for m in request.messages], sort_keys=True)


class Recording:
    """Passes calls to the real client and keeps each request and its answer."""

    def __init__(self, inner: OpenAIChatClient) -> None:
        self.inner = inner
        self.base_url = inner.base_url
        self.calls: list[tuple[ChatRequest, ChatResponse]] = []

    async def complete(self, request: ChatRequest) -> ChatResponse:
        response = await self.inner.complete(request)
        self.calls.append((request, response))
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


class Canned:
    """Answers at once with a recorded answer: pytest-geo's work without the SDK."""

    def __init__(self, answers: dict[str, ChatResponse], base_url: str) -> None:
        self.answers = answers
        self.base_url = base_url

    async def complete(self, request: ChatRequest) -> ChatResponse:
        return self.answers[_key(request)]

    async def aclose(self) -> None:
        pass


def cpu(run: Callable[[], object]) -> float:
    start = time.process_time()
    run()
    return time.process_time() - start


def engine(settings: Settings, client: object, batch: list[GeoRow]) -> None:
    session = GeoSession(settings, build_stack(settings, client))  # type: ignore[arg-type]
    try:
        outcomes = session.evaluate(batch)
    finally:
        session.close()
    errors = [o.error for o in outcomes if o.error]
    if errors:
        raise SystemExit(f"{len(errors)} rows failed, e.g. {errors[0]}")


def direct(client: Any, requests: list[ChatRequest], concurrency: int) -> None:
    """Every request through `client` on a fresh loop, `concurrency` at a time."""

    async def main() -> None:
        slots = asyncio.Semaphore(concurrency)

        async def one(request: ChatRequest) -> None:
            async with slots:
                await client.complete(request)

        await asyncio.gather(*(one(r) for r in requests))
        await client.aclose()

    asyncio.run(main())


# What the timed run of `ours` splits out, by the names the engine calls them under.
TIMED = {
    "answer cache (key, lookup, append)": [(cache, "cache_key"), (cache.ResponseCache, "read"),
                                           (cache.ResponseCache, "put")],
    "prompt rendering": [(experiment, "render"), (experiment, "candidate_values")],
    "answer parsing (and size/cap checks)": [(experiment, "parse_ranking"), (experiment, "parse_rewrite"),
                                             (experiment, "check_answer"), (experiment, "kept_answer")],
    "fact check": [(experiment, "fact_violations")],
}


@contextmanager
def timed_functions(totals: Counter[str]) -> Iterator[None]:
    """Each function in TIMED wrapped to add its thread CPU time to its bucket."""
    saved = []
    for bucket, places in TIMED.items():
        for owner, name in places:
            original = getattr(owner, name)
            saved.append((owner, name, original))

            def wrapper(*args: Any, _original: Any = original, _bucket: str = bucket, **kwargs: Any) -> Any:
                start = time.thread_time_ns()
                try:
                    return _original(*args, **kwargs)
                finally:
                    totals[_bucket] += time.thread_time_ns() - start

            setattr(owner, name, wrapper)
    try:
        yield
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)


def child_cpu(command: list[str], cwd: Path) -> float:
    """CPU seconds (user + system) of a fresh process; exits loudly if it failed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def all_in(url: str, directory: Path, rows: int, concurrency: int, run: int) -> dict[str, float]:
    """Process CPU per call of `pytest` and `egeo evaluate`: N rows less 1 row, over the
    calls the extra rows made (3 a row)."""
    figures = {}
    for name in ("pytest", "egeo"):
        spent = {}
        for n in (rows, 1):
            dataset = directory / f"rows{n}.jsonl"
            answers = directory / f"cache-{name}-{n}-{run}"
            if name == "pytest":
                command = [sys.executable, "-m", "pytest", dataset.name, "--geo-base-url", url, "-q",
                           "-p", "no:cacheprovider", "--geo-concurrency", str(concurrency),
                           "--geo-cache-dir", str(answers)]
            else:
                command = [sys.executable, "-m", "pytest_geo", "evaluate", "--dataset", str(dataset),
                           "--base-url", url, "--concurrency", str(concurrency), "--cache-dir", str(answers)]
            spent[n] = child_cpu(command, directory)
        figures[name] = (spent[rows] - spent[1]) / (3 * (rows - 1))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=600)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--latency", type=float, default=0.02)
    parser.add_argument("--repeat", type=int, default=3, help="runs of each, alternated; the medians count")
    parser.add_argument("--no-processes", action="store_true", help="skip the all-in runs of pytest and egeo")
    args = parser.parse_args()
    measured: dict[str, list[float]] = {}
    shares: list[Counter[str]] = []
    with fake_server(args.latency) as url, tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        for n in (args.rows, 1):
            write_decoy_dataset(n, directory / f"rows{n}.jsonl")
        (directory / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
        batch = [r for r in iter_dataset(directory / f"rows{args.rows}.jsonl", 0) if isinstance(r, GeoRow)]
        sent = Recording(OpenAIChatClient(api_key="bench-dummy", base_url=url))
        runs = iter(range(1_000_000))

        def settings(**changes: Any) -> Settings:  # a fresh cache directory each run: every call writes
            return Settings(prompts_dir=PROMPTS, base_url=url, concurrency=args.concurrency,
                            cache_dir=directory / f"cache{next(runs)}", **changes)

        engine(settings(), sent, batch)  # warm-up, and the requests and answers to replay
        requests = [request for request, _ in sent.calls]
        plain = [ChatRequest(r.role, r.model, r.messages, r.temperature, r.context, r.max_output_tokens,
                             r.response_schema, r.reasoning_effort) for r in requests]  # as the engine sends them
        answers = {_key(request): response for request, response in sent.calls}
        calls = len(requests)

        def record(name: str, seconds: float, passes: int = 1) -> None:
            measured.setdefault(name, []).append(seconds / (passes * calls) * 1e6)

        # The layers are measured as differences of runs that cost little: over PASSES
        # times the calls, so that what each run costs once does not swamp them.
        many = plain * PASSES

        ledger_dir = directory / "ledgers"
        ledger_dir.mkdir()
        for n in range(args.repeat):
            if not args.no_processes:
                for name, per_call in all_in(url, directory, args.rows, args.concurrency, n).items():
                    measured.setdefault(f"all in, {name}", []).append(per_call * 1e6)
            record("whole", cpu(lambda: engine(settings(), OpenAIChatClient(api_key="bench-dummy", base_url=url),
                                               batch)))
            record("sdk", cpu(lambda: direct(OpenAIChatClient(api_key="bench-dummy", base_url=url), requests,
                                             2 * args.concurrency)))
            record("ours", cpu(lambda: engine(settings(), Canned(answers, url), batch)))
            record("canned", cpu(lambda: direct(Canned(answers, url), many, 2 * args.concurrency)), PASSES)
            record("layers", cpu(lambda: direct(build_stack(settings(use_cache=False), Canned(answers, url)).client,
                                                many, 2 * args.concurrency)), PASSES)
            record("budget", cpu(lambda: direct(build_stack(settings(
                use_cache=False, budget_tokens=10**12, budget_ledger=Ledger.create(ledger_dir)),
                Canned(answers, url)).client, many, 2 * args.concurrency)), PASSES)
            totals: Counter[str] = Counter()
            with timed_functions(totals):
                record("ours, timed", cpu(lambda: engine(settings(), Canned(answers, url), batch)))
            shares.append(totals)
    per_call = {name: statistics.median(values) for name, values in measured.items()}
    parts = {bucket: statistics.median(s[bucket] for s in shares) / 1e3 / calls for bucket in TIMED}
    layers = per_call["layers"] - per_call["canned"]
    glue = per_call["ours"] - sum(parts.values()) - layers
    load = os.getloadavg()[0]
    print(f"{args.rows} rows of 10 candidates = {calls} calls, concurrency {args.concurrency}, latency "
          f"{args.latency:g} s, answer cache on; CPU per call, median of {args.repeat} (load average {load:.1f}):")
    for name in ("all in, pytest", "all in, egeo"):
        if name in per_call:
            print(f"  {name + ' (N rows less 1 row, fresh process):':58} {per_call[name]:6.0f} us"
                  f"  (target <= {TARGET_US} us: {'met' if per_call[name] <= TARGET_US else 'MISSED'})")
    print(f"  {'whole: the engine in this process, over the SDK and HTTP:':58} {per_call['whole']:6.0f} us"
          f"  (target <= {TARGET_US} us: {'met' if per_call['whole'] <= TARGET_US else 'MISSED'})")
    print("where a call's CPU goes:")
    rows = [("SDK + aiohttp transport (sdk: OpenAIChatClient alone)", per_call["sdk"]),
            *((f"{bucket}", parts[bucket]) for bucket in TIMED),
            ("client layers: usage, healing, breaker, slots (budget off)", layers),
            ("scheduler and engine glue: runner, session, ask, transcripts", glue),
            ("engine and SDK sharing one loop (whole - sdk - ours)", per_call["whole"] - per_call["sdk"]
             - per_call["ours"])]
    for label, value in rows:
        print(f"  {label:62} {value:6.0f} us  {100 * value / per_call['whole']:4.0f}%")
    print(f"  {'(ours: all of pytest-geo without the SDK; timed run of it)':62} {per_call['ours']:6.0f} us"
          f"  ({per_call['ours, timed']:.0f} us)")
    print(f"  {'(a budget, when set: its ledger file per call, not in whole)':62} "
          f"{per_call['budget'] - per_call['layers']:6.0f} us")


if __name__ == "__main__":
    main()
