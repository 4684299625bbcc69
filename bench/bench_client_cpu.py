"""Client CPU per model call: pytest-geo's own share beside the `openai` SDK's, in one run.

Three runs over the same GEO rows, each measuring this process's CPU time (the fake
server runs in its own process, as in bench_concurrency.py, so its CPU is not counted):

  whole    the engine as the plugin runs it (`GeoSession.evaluate`: prompt rendering,
           answer parsing, the fact check, the answer cache writing to a temp dir, usage,
           the runner) over the real SDK and HTTP;
  sdk      the SDK alone: the very requests `whole` sent, replayed through
           `OpenAIChatClient.complete` at the same concurrency (the SDK, its aiohttp
           transport and our thin client, nothing else);
  ours     the engine over an in-process client that hands back `whole`'s answers at
           once: everything pytest-geo does per call, without the SDK or HTTP.

Target: ours <= sdk. `whole - sdk` is printed as a cross-check of `ours`.

    python bench/bench_client_cpu.py [--rows 600] [--concurrency 32] [--latency 0.02] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from common import PROMPTS, fake_server, kettle_rows

from pytest_geo.data.dataset import GeoRow
from pytest_geo.engine.session import GeoSession
from pytest_geo.llm.base import ChatRequest, ChatResponse
from pytest_geo.llm.openai_client import OpenAIChatClient
from pytest_geo.llm.stack import build_stack
from pytest_geo.settings import Settings


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


def replay(url: str, requests: list[ChatRequest], concurrency: int) -> None:
    async def main() -> None:
        client = OpenAIChatClient(api_key="bench-dummy", base_url=url)
        slots = asyncio.Semaphore(concurrency)

        async def one(request: ChatRequest) -> None:
            async with slots:
                await client.complete(request)

        await asyncio.gather(*(one(r) for r in requests))
        await client.aclose()

    asyncio.run(main())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=600)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--latency", type=float, default=0.02)
    parser.add_argument("--repeat", type=int, default=3, help="runs of each, alternated; the medians count")
    args = parser.parse_args()
    with fake_server(args.latency) as url:
        with tempfile.TemporaryDirectory() as tmp:
            batch = kettle_rows(args.rows, Path(tmp))
            sent = Recording(OpenAIChatClient(api_key="bench-dummy", base_url=url))

            def settings(n: int) -> Settings:  # a fresh cache directory each run: every call writes
                return Settings(prompts_dir=PROMPTS, base_url=url, concurrency=args.concurrency,
                                cache_dir=Path(tmp) / f"cache{n}")

            engine(settings(0), sent, batch)  # warm-up, and the requests and answers to replay
            requests = [request for request, _ in sent.calls]
            answers = {_key(request): response for request, response in sent.calls}
            calls = len(requests)
            measured: dict[str, list[float]] = {"whole": [], "sdk": [], "ours": []}
            for n in range(args.repeat):
                measured["whole"].append(cpu(lambda n=n: engine(  # type: ignore[misc]
                    settings(3 * n + 1), OpenAIChatClient(api_key="bench-dummy", base_url=url), batch)))
                measured["sdk"].append(cpu(lambda: replay(url, requests, 2 * args.concurrency)))
                measured["ours"].append(cpu(lambda n=n: engine(settings(3 * n + 2), Canned(answers, url), batch)))  # type: ignore[misc]
        per_call = {name: statistics.median(values) / calls * 1e6 for name, values in measured.items()}
        print(f"{args.rows} rows = {calls} calls, concurrency {args.concurrency}, latency {args.latency:g}s, "
              f"CPU per call (median of {args.repeat}):")
        print(f"  whole (engine + SDK + HTTP): {per_call['whole']:.0f} us")
        print(f"  sdk   (SDK + HTTP alone):    {per_call['sdk']:.0f} us")
        print(f"  ours  (pytest-geo alone):    {per_call['ours']:.0f} us "
              f"(whole - sdk = {per_call['whole'] - per_call['sdk']:.0f} us)")
        print(f"  ours / sdk: {per_call['ours'] / per_call['sdk']:.2f} (target <= 1.00)")


if __name__ == "__main__":
    main()
