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

`sdk` is split by replaying the same requests through less of the stack, at the same
concurrency: aiohttp alone (a `ClientSession` posting the bytes and decoding the answer),
then httpx2 over aiohttp (the SDK's HTTP client, `openai.DefaultAioHttpClient`, without the
SDK); the SDK's own share is `sdk` less that. Side by side, what two choices save:
  sdk, driven plainly   the SDK given the body as a dict to encode (so it is encoded a second
                        time, after the cache's key) and the path to join to its base URL,
                        less `sdk` (posted as bytes, to the whole URL: llm/openai_client.py);
  default GC pace       `whole` and the two all-in runs again with the cyclic collector at
                        its default pace (engine/gc_pace.py made a no-op), less the runs at
                        the pace a run sets; `gc in whole` is the collector's own CPU
                        (`gc.callbacks`, each collection's thread time) in `whole`.
`pytest per item` is all in `pytest` less all in `egeo`: pytest's own work per item (its
hooks, capture, reporting), three calls a row, and what it adds to a collection.

    python bench/bench_client_cpu.py [--rows 600] [--concurrency 32] [--latency 0.02] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiohttp
import openai
from common import PROMPTS, fake_server, write_decoy_dataset

import pytest_geo.engine.experiment as experiment
import pytest_geo.engine.gc_pace as gc_pace
import pytest_geo.llm.cache as cache
from pytest_geo.data.dataset import GeoRow, iter_dataset
from pytest_geo.engine.session import GeoSession
from pytest_geo.llm.base import ChatRequest, ChatResponse
from pytest_geo.llm.factory import sdk_client_class
from pytest_geo.llm.ledger import Ledger
from pytest_geo.llm.profiles import sent_body, sent_json
from pytest_geo.llm.stack import build_stack
from pytest_geo.settings import Settings

OpenAIChatClient = sdk_client_class()  # imported as a pytest run imports it (llm/factory.py)
TARGET_US = 1500
PASSES = 5
# A child process at the collector's default pace: gc_pace's raised threshold made a no-op.
DEFAULT_PACE = "import pytest_geo.engine.gc_pace as g; g.YOUNG_THRESHOLD = 0; import sys; sys.argv[0] = {name!r}; "


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


@contextmanager
def default_pace() -> Iterator[None]:
    """The cyclic collector at its default pace while runners are open (gc_pace a no-op)."""
    saved = gc_pace.YOUNG_THRESHOLD
    gc_pace.YOUNG_THRESHOLD = 0
    try:
        yield
    finally:
        gc_pace.YOUNG_THRESHOLD = saved


@contextmanager
def collector_time(totals: Counter[str]) -> Iterator[None]:
    """The thread CPU time of every collection meanwhile, whichever thread ran it."""
    started: dict[int, float] = {}

    def observe(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[threading.get_ident()] = time.thread_time()
        elif (begun := started.pop(threading.get_ident(), None)) is not None:
            totals["gc"] += time.thread_time() - begun

    gc.callbacks.append(observe)
    try:
        yield
    finally:
        gc.callbacks.remove(observe)


def direct(client: Any, requests: list[ChatRequest], concurrency: int) -> None:
    """Every request through `client` on a fresh loop, `concurrency` at a time, with the
    collector at the pace a run sets (engine/gc_pace.py), as in `whole`."""

    async def main() -> None:
        slots = asyncio.Semaphore(concurrency)

        async def one(request: ChatRequest) -> None:
            async with slots:
                await client.complete(request)

        await asyncio.gather(*(one(r) for r in requests))
        await client.aclose()

    gc_pace.hold()
    try:
        asyncio.run(main())
    finally:
        gc_pace.release()


def plainly_driven(url: str) -> Any:
    """The SDK client given each body as a dict to encode and the path to join to its base
    URL: what `OpenAIChatClient._post` saves by posting the cache key's bytes whole."""
    client = OpenAIChatClient(api_key="bench-dummy", base_url=url)

    async def post(request: ChatRequest, retries: int | None = None) -> Any:
        completion = await client.sdk.post("/chat/completions", body=sent_body(request), cast_to=object,
                                           options={} if retries is None else {"max_retries": retries})
        client._reached = True
        return completion

    client._post = post  # type: ignore[method-assign]
    return client


class Transport:
    """Posts a request's bytes and decodes the JSON answer with the SDK's HTTP client
    (httpx2 over aiohttp) or with aiohttp alone: the floors under the SDK."""

    def __init__(self, url: str, sdk_http: bool) -> None:
        self.url = f"{url}/chat/completions"
        self.headers = {"Authorization": "Bearer bench-dummy", "Content-Type": "application/json"}
        self.http: Any = openai.DefaultAioHttpClient() if sdk_http else None
        self.session: aiohttp.ClientSession | None = None

    async def complete(self, request: ChatRequest) -> None:
        if self.http is not None:
            (await self.http.post(self.url, content=sent_json(request), headers=self.headers)).json()
            return
        if self.session is None:
            self.session = aiohttp.ClientSession()
        async with self.session.post(self.url, data=sent_json(request), headers=self.headers) as response:
            json.loads(await response.read())

    async def aclose(self) -> None:
        if self.http is not None:
            await self.http.aclose()
        if self.session is not None:
            await self.session.close()


# What the timed run of `ours` splits out, by the names the engine calls them under.
TIMED = {
    "answer cache (key, lookup, append)": [(cache, "cache_key"), (cache.ResponseCache, "read"),
                                           (cache.ResponseCache, "put")],
    "prompt rendering": [(experiment, "render"), (experiment.Shown, "of"), (experiment.Shown, "values"),
                         (experiment.Shown, "rewritten")],
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


def all_in(url: str, directory: Path, rows: int, concurrency: int, run: int, pace: bool,
           python: str = sys.executable) -> dict[str, float]:
    """Process CPU per call of `pytest` and `egeo evaluate`: N rows less 1 row, over the
    calls the extra rows made (3 a row); `pace` False: at the collector's default pace;
    `python`: the interpreter (of a venv) whose install runs."""
    figures = {}
    for name in ("pytest", "egeo"):
        spent = {}
        for n in (rows, 1):
            dataset = directory / f"rows{n}.jsonl"
            answers = directory / f"cache-{name}-{n}-{run}-{pace}"
            if name == "pytest":
                start = ["-m", "pytest"] if pace else ["-c", DEFAULT_PACE.format(name="pytest")
                                                       + "import pytest; sys.exit(pytest.console_main())"]
                command = [python, *start, dataset.name, "--geo-base-url", url, "-q",
                           "-p", "no:cacheprovider", "--geo-concurrency", str(concurrency),
                           "--geo-cache-dir", str(answers)]
            else:
                start = ["-m", "pytest_geo"] if pace else ["-c", DEFAULT_PACE.format(name="egeo")
                                                           + "from pytest_geo.cli import main; sys.exit(main())"]
                command = [python, *start, "evaluate", "--dataset", str(dataset),
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

        def replay(client: Any) -> float:  # `requests` are shaped once: their bytes are encoded already
            return cpu(lambda: direct(client, requests, 2 * args.concurrency))

        # The layers are measured as differences of runs that cost little: over PASSES
        # times the calls, so that what each run costs once does not swamp them.
        many = plain * PASSES

        ledger_dir = directory / "ledgers"
        ledger_dir.mkdir()
        for n in range(args.repeat):
            if not args.no_processes:
                for pace in (True, False):
                    for name, per_call in all_in(url, directory, args.rows, args.concurrency, n, pace).items():
                        measured.setdefault(f"all in, {name}" + ("" if pace else ", default pace"), []).append(
                            per_call * 1e6)
            collected: Counter[str] = Counter()
            with collector_time(collected):
                record("whole", cpu(lambda: engine(settings(), OpenAIChatClient(api_key="bench-dummy", base_url=url),
                                                   batch)))
            record("gc in whole", collected["gc"])
            with default_pace():
                collected = Counter()
                with collector_time(collected):
                    record("whole, default pace", cpu(lambda: engine(
                        settings(), OpenAIChatClient(api_key="bench-dummy", base_url=url), batch)))
                record("gc in whole, default pace", collected["gc"])
            record("sdk", replay(OpenAIChatClient(api_key="bench-dummy", base_url=url)))
            record("sdk, driven plainly", replay(plainly_driven(url)))
            record("httpx2 + aiohttp", replay(Transport(url, sdk_http=True)))
            record("aiohttp", replay(Transport(url, sdk_http=False)))
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
    whole = per_call["whole"]

    def line(label: str, value: float, share: bool = True) -> None:
        print(f"  {label:62} {value:6.0f} us" + (f"  {100 * value / whole:4.0f}%" if share else ""))

    print(f"{args.rows} rows of 10 candidates = {calls} calls, concurrency {args.concurrency}, latency "
          f"{args.latency:g} s, answer cache on; CPU per call, median of {args.repeat} (load average {load:.1f}):")
    for name in ("all in, pytest", "all in, egeo"):
        if name in per_call:
            print(f"  {name + ' (N rows less 1 row, fresh process):':58} {per_call[name]:6.0f} us"
                  f"  (target <= {TARGET_US} us: {'met' if per_call[name] <= TARGET_US else 'MISSED'})")
    print(f"  {'whole: the engine in this process, over the SDK and HTTP:':58} {whole:6.0f} us"
          f"  (target <= {TARGET_US} us: {'met' if whole <= TARGET_US else 'MISSED'})")
    print("where a call's CPU goes (share of whole):")
    line("SDK + aiohttp transport (sdk: OpenAIChatClient alone)", per_call["sdk"])
    line("  of which aiohttp: post the bytes, decode the answer", per_call["aiohttp"])
    line("  of which httpx2 over aiohttp (the SDK's HTTP client)", per_call["httpx2 + aiohttp"] - per_call["aiohttp"])
    line("  of which the SDK and our client (sdk - httpx2 + aiohttp)", per_call["sdk"] - per_call["httpx2 + aiohttp"])
    for bucket in TIMED:
        line(bucket, parts[bucket])
    line("client layers: usage, healing, breaker, slots (budget off)", layers)
    line("scheduler and engine glue: runner, session, ask, transcripts", glue)
    line("engine and SDK sharing one loop (whole - sdk - ours)", whole - per_call["sdk"] - per_call["ours"])
    line("(cyclic GC, all threads, within whole)", per_call["gc in whole"])
    line(f"(ours: all of pytest-geo without the SDK; timed run: {per_call['ours, timed']:.0f} us)", per_call["ours"])
    if "all in, pytest" in per_call:
        line("(pytest per item, over 3 calls: all in pytest - all in egeo)",
             per_call["all in, pytest"] - per_call["all in, egeo"], share=False)
    line("(a budget, when set: its ledger file per call, not in whole)", per_call["budget"] - per_call["layers"],
         share=False)
    print("side by side: what each choice saves per call (the run without it, less the run with it):")
    line("the SDK driven plainly (dict body encoded again, path joined)", per_call["sdk, driven plainly"]
         - per_call["sdk"], share=False)
    line(f"default GC pace, whole (its GC: {per_call['gc in whole, default pace']:.0f} us, "
         f"at the run's pace {per_call['gc in whole']:.0f} us)", per_call["whole, default pace"] - whole, share=False)
    for name in ("pytest", "egeo"):
        if f"all in, {name}" in per_call:
            line(f"default GC pace, all in {name}", per_call[f"all in, {name}, default pace"]
                 - per_call[f"all in, {name}"], share=False)


if __name__ == "__main__":
    main()
