"""The run's client stack, built in one place. A call goes down it, outermost first:

    Usage      counts calls, tokens and cost per role (llm/usage.py)
    Healing    shapes the request into the body its model accepts, and heals a
               parameter the server refuses (llm/profiles.py, llm/healing.py),
               remembering it beside the cache (llm/lessons.py)
    Cache      answers already given to the same body from the same server (llm/cache.py)
    Breaker    stops calling a server that cannot serve the run (llm/breaker.py)
    Budget     --geo-budget: reserves each call's worst case before it is sent (llm/budget.py)
    Bounded    at most N requests in flight, N moved by the concurrency controller
               (llm/bounded.py, llm/adaptive.py)
    Batch      --geo-batch: the calls go through the Batch API (llm/batch.py)
    backend    the OpenAI SDK client, the mock, or a client a conftest gave

so a cache hit never waits for a request slot, is served while the server is down and
reserves no budget (it costs nothing), a call waiting for budget holds no request slot,
and the cache keys on the body as sent."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pytest_geo.llm.adaptive import Controller, controller_for
from pytest_geo.llm.base import ChatClient
from pytest_geo.llm.bounded import BoundedClient
from pytest_geo.llm.breaker import Breaker
from pytest_geo.llm.budget import with_budget
from pytest_geo.llm.factory import ClientSetupError, build_client, with_cache
from pytest_geo.llm.healing import HealingClient
from pytest_geo.llm.lessons import load_lessons, save_lessons
from pytest_geo.llm.prices import price_table
from pytest_geo.llm.profiles import Lesson
from pytest_geo.llm.usage import UsageClient
from pytest_geo.settings import Settings

MIN_CONSECUTIVE_FAILURES = 8


@dataclass
class ClientStack:
    """The assembled layers: `client` is what the engine calls; the others are kept
    for what they report (usage, the breaker's verdict, concurrency, what was learned)."""

    client: ChatClient
    usage: UsageClient
    healing: HealingClient
    breaker: Breaker
    concurrency: Controller
    backend: ChatClient


def batch_client(backend: ChatClient, settings: Settings) -> ChatClient:
    """The backend behind the Batch API; batch ids are kept beside the answer cache."""
    from pytest_geo.llm.batch import BatchClient

    if not hasattr(backend, "sdk"):
        raise ClientSetupError("--geo-batch needs the OpenAI client (a key, not the mock or a custom client)")
    return BatchClient(backend, settings.cache_dir if settings.use_cache else None)


def remembered_lessons(settings: Settings, backend: ChatClient) -> tuple[list[Lesson], Callable[[Lesson], None] | None]:
    """Request changes remembered beside the answer cache for the backend's server, and
    how to remember a new one (llm/lessons.py); none without a cache or a server URL."""
    base_url = getattr(backend, "base_url", None)
    cache_dir = settings.cache_dir
    if not settings.use_cache or cache_dir is None or not isinstance(base_url, str):
        return [], None
    return load_lessons(cache_dir, base_url), lambda lesson: save_lessons(cache_dir, base_url, [lesson])


def build_stack(settings: Settings, client: ChatClient | None = None) -> ClientStack:
    """Every layer over `client` (else the backend the settings name)."""
    backend = client or build_client(settings)
    sender = backend
    batching = settings.batch and not settings.mock  # the mock answers at once: nothing to batch
    if batching:
        sender = batch_client(backend, settings)
    # `concurrency` counts rows; a row makes at most two calls at once (rank_before and
    # the rewrite), so 2N request slots never hold a plain row back, and they still
    # bound --geo-repeats (K experiments per row) and anything else sharing the client.
    # Under --geo-concurrency auto the controller resizes both as the server answers.
    concurrency = controller_for(settings.concurrency, settings.max_concurrency, batch=batching,
                                 start=settings.start_concurrency)
    observe = getattr(backend, "observe_responses", None)
    if callable(observe):  # backends that see HTTP responses report status and headers
        observe(concurrency.observe)
    hold = getattr(backend, "hold_requests", None)
    if callable(hold):  # and hold a request about to be sent during a server's pause
        hold(concurrency.requests.hold)
    bounded = BoundedClient(sender, concurrency.requests, on_success=concurrency.call_succeeded)
    # The breaker trips after as many consecutive failed calls as there are request slots
    # at the start (each already retried): every call in flight failed, then as many again.
    breaker = Breaker(with_budget(bounded, settings), getattr(backend, "base_url", None),
                      consecutive=max(MIN_CONSECUTIVE_FAILURES, concurrency.requests.limit))
    cached = with_cache(breaker, backend, settings)
    remembered, remember = remembered_lessons(settings, backend)
    healing = HealingClient(cached, structured=settings.structured, reasoning_effort=settings.reasoning_effort,
                            lessons=remembered, on_unfixable=breaker.refused, probe=not batching,
                            on_learn=remember)
    prices = {} if settings.mock else price_table(settings.prices)  # the mock costs nothing
    usage = UsageClient(healing, prices)
    return ClientStack(client=usage, usage=usage, healing=healing, breaker=breaker, concurrency=concurrency,
                       backend=backend)
