"""The run's client stacks, built in one place: one per endpoint (llm/endpoints.py),
each built on first use, behind a router that sends each request to the stack of its
model's endpoint, with the endpoint's prefix stripped from the model. So every endpoint
has its own cache namespace, breaker, concurrency controller (rate limits belong to a
provider account), healing and remembered request changes, and a key goes only to its
own endpoint; the budget stays one ledger. A call goes down its endpoint's stack,
outermost first:

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

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from pytest_geo.llm import factory
from pytest_geo.llm.adaptive import Controller, controller_for, share_rows
from pytest_geo.llm.base import ChatClient, ChatRequest, ChatResponse, ServerUnusable
from pytest_geo.llm.bounded import BoundedClient
from pytest_geo.llm.breaker import Breaker
from pytest_geo.llm.budget import shared_ledger, with_budget
from pytest_geo.llm.endpoints import Endpoint, EndpointError, describe, resolve
from pytest_geo.llm.factory import ClientSetupError, literal, with_cache
from pytest_geo.llm.healing import HealingClient
from pytest_geo.llm.ledger import Ledger
from pytest_geo.llm.lessons import load_lessons, save_lessons
from pytest_geo.llm.prices import price_table
from pytest_geo.llm.profiles import Lesson
from pytest_geo.llm.providers import ProviderError
from pytest_geo.llm.usage import UsageClient, UsageTable, merge_usage
from pytest_geo.local_server import LOCAL_START_CONCURRENCY, LOCAL_TIMEOUT, local_host
from pytest_geo.settings import DEFAULT_CONCURRENCY, DEFAULT_TIMEOUT, Settings, server_url

MIN_CONSECUTIVE_FAILURES = 8


@dataclass
class EndpointStack:
    """One endpoint's assembled layers: `client` is what the router calls; the others are
    kept for what they report (usage, the breaker's verdict, concurrency, what was learned)."""

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


def build_endpoint_stack(settings: Settings, backend: ChatClient, ledger: Ledger | None = None,
                         name: str | None = None, cache_marks: tuple[str, ...] = ()) -> EndpointStack:
    """Every layer over one endpoint's `backend` (`name`: the endpoint's, for messages;
    None for the default server); `ledger`: the run's budget, shared by every endpoint;
    `cache_marks`: the endpoint's (llm/endpoints.py)."""
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
    bounded = BoundedClient(sender, concurrency.requests, on_success=concurrency.call_succeeded,
                            on_tokens=concurrency.tokens_charged)
    # The breaker trips after as many consecutive failed calls as there are request slots
    # at the start (each already retried): every call in flight failed, then as many again.
    breaker = Breaker(with_budget(bounded, settings, ledger), getattr(backend, "base_url", None),
                      consecutive=max(MIN_CONSECUTIVE_FAILURES, concurrency.requests.limit), name=name)
    cached = with_cache(breaker, backend, settings)
    remembered, remember = remembered_lessons(settings, backend)
    healing = HealingClient(cached, structured=settings.structured, reasoning_effort=settings.reasoning_effort,
                            lessons=remembered, on_unfixable=breaker.refused, probe=not batching,
                            on_learn=remember, cache_marks=cache_marks)
    # The mock costs nothing; a server other than OpenAI's API has only geo_prices (llm/prices.py).
    prices = {} if settings.mock else price_table(settings.prices, server_url(settings.base_url))
    usage = UsageClient(healing, prices)
    return EndpointStack(client=usage, usage=usage, healing=healing, breaker=breaker, concurrency=concurrency,
                         backend=backend)


def endpoint_settings(settings: Settings, endpoint: Endpoint) -> Settings:
    """The run's settings for calls to `endpoint`: its URL, and (unless the user set one)
    the timeout and starting concurrency for where it is (settings.py)."""
    local = local_host(endpoint.base_url) is not None
    return replace(settings, base_url=endpoint.base_url, batch=settings.batch and endpoint.batch,
                   timeout=settings.timeout if settings.timeout_given else LOCAL_TIMEOUT if local else DEFAULT_TIMEOUT,
                   start_concurrency=LOCAL_START_CONCURRENCY if local else DEFAULT_CONCURRENCY)


def needed_models(settings: Settings) -> list[tuple[str, str]]:
    """(role, model) of the calls a run's rows make: their endpoints must be usable at start.
    The judges rank in the ranker's place (the first judge first: its controller bounds the
    rows in flight); a variant's own rewriter model is needed too."""
    rankers = [(f"judge {j.name}", j.model) for j in settings.judges] or [("ranker", settings.models["ranker"])]
    rewriters = [("rewriter", settings.models["rewriter"])]
    rewriters += [(f"variant {name}'s rewriter", model) for name, model in settings.variant_models.items()]
    return rankers + rewriters


class ClientStack:
    """The run's stacks: one per endpoint, built on first use (the default server's
    backend may be given: a conftest's client); `client` routes each request by its model.
    The endpoints of `needed` (role, model) pairs are built at once, so a missing key or
    a broken provider is an error before any call; the first one's concurrency
    controller bounds the rows in flight (its model is the ranker's, called twice a row),
    with the rows every other endpoint's controller asks for added under auto."""

    def __init__(self, settings: Settings, client: ChatClient | None = None,
                 needed: Iterable[tuple[str, str]] | None = None,
                 wrap: Callable[[ChatClient], ChatClient] | None = None) -> None:
        self.settings = settings
        self._given = client
        self._wrap = wrap
        self.ledger = shared_ledger(settings)
        self.stacks: dict[str | None, EndpointStack] = {}  # endpoint name (None: the default server) -> stack
        self._routes: dict[str, tuple[EndpointStack, str]] = {}  # model -> its stack, the model sent
        self._failed: dict[str, str] = {}  # endpoint name -> why its stack could not be built
        primary = None
        for role, model in needed if needed is not None else needed_models(settings):
            try:
                stack = self.route(model)[0]
            except ClientSetupError as exc:
                if self._endpoint(model)[0] is None:
                    raise  # the default server's own message, as before endpoints
                raise ClientSetupError(literal(f"the {role} model {model}: ") + exc.template) from None
            primary = primary or stack
        if primary is None:
            primary = self.route(settings.models["ranker"])[0]
        # Every endpoint's rows in flight at once: none waits on another's (llm/adaptive.py)
        share_rows([primary.concurrency, *(s.concurrency for s in self.stacks.values() if s is not primary)])
        self.primary = primary
        self.concurrency = primary.concurrency
        self.backend = primary.backend
        self.client: ChatClient = Router(self)

    def route(self, model: str) -> tuple[EndpointStack, str]:
        """The stack `model`'s calls go to and the model name sent there, building that
        stack on first use; raises ClientSetupError when it cannot be built."""
        route = self._routes.get(model)
        if route is not None:
            return route
        endpoint, sent = self._endpoint(model)
        key = None if endpoint is None else endpoint.name
        stack = self.stacks.get(key)
        if stack is None:
            stack = self.stacks[key] = self._build(endpoint)
        route = self._routes[model] = (stack, sent)
        return route

    def _endpoint(self, model: str) -> tuple[Endpoint | None, str]:
        """`model`'s endpoint and the name sent there; the mock answers every model itself."""
        if self.settings.mock:
            return None, model
        try:
            return resolve(model, self.settings.endpoints)
        except (EndpointError, ProviderError) as exc:
            raise ClientSetupError(literal(str(exc))) from None

    def _build(self, endpoint: Endpoint | None) -> EndpointStack:
        settings = self.settings if endpoint is None else endpoint_settings(self.settings, endpoint)
        if endpoint is not None:
            backend = factory.build_client(settings, endpoint)
        else:  # the default server's: the factory's one-argument call, as tests replace it
            backend = self._given or factory.build_client(settings)
        if self._wrap is not None:
            backend = self._wrap(backend)
        if endpoint is None:
            return build_endpoint_stack(settings, backend, self.ledger)
        return build_endpoint_stack(settings, backend, self.ledger, describe(endpoint), endpoint.cache_marks)

    def failed(self, model: str, why: str) -> str:
        """A stack that could not be built at a call: its endpoint stops like a tripped breaker."""
        name = model.partition("/")[0]
        return self._failed.setdefault(name, why)

    def usage_table(self) -> UsageTable:
        """Model usage per role, over every endpoint."""
        total: UsageTable = {}
        for stack in self.stacks.values():
            merge_usage(total, stack.usage.usage)
        return total

    def usage_by_endpoint(self) -> dict[str, UsageTable]:
        """Model usage per role of each endpoint used (`default`: the default server)."""
        return {name or "default": stack.usage.usage for name, stack in self.stacks.items() if stack.usage.usage}

    @property
    def priced(self) -> bool:
        """Calls have prices (not the mock's)."""
        return bool(self.primary.usage.prices)

    @property
    def stopped(self) -> str | None:
        """Why calls to an endpoint are no longer sent (its breaker tripped, it could not
        be built), each endpoint's reason once; None while every endpoint is called."""
        reasons = [s.breaker.tripped for s in self.stacks.values() if s.breaker.tripped] + list(self._failed.values())
        return "; ".join(reasons) if reasons else None

    def request_changes(self) -> list[dict[str, object]]:
        """What the servers refused and how requests changed (llm/healing.py), every endpoint's."""
        return [change for stack in self.stacks.values() for change in stack.healing.lessons_json()]

    async def aclose(self) -> None:
        """Close every endpoint's stack, each even when another's close failed."""
        failures = []
        for stack in self.stacks.values():
            try:
                await stack.client.aclose()
            except Exception as exc:  # the first is raised once all are closed
                failures.append(exc)
        if self.ledger is not None:
            self.ledger.close()
        if failures:
            raise failures[0]


class Router:
    """Sends each request to its model's endpoint stack, with the model name that
    endpoint serves; an endpoint whose stack cannot be built fails only its own calls."""

    def __init__(self, stacks: ClientStack) -> None:
        self.stacks = stacks

    async def complete(self, request: ChatRequest) -> ChatResponse:
        try:
            stack, sent = self.stacks.route(request.model)
        except ClientSetupError as exc:
            raise ServerUnusable(self.stacks.failed(request.model, str(exc))) from None
        if sent != request.model:
            request = replace(request, model=sent)
        return await stack.client.complete(request)

    async def aclose(self) -> None:
        await self.stacks.aclose()


def build_stack(settings: Settings, client: ChatClient | None = None,
                needed: Iterable[tuple[str, str]] | None = None,
                wrap: Callable[[ChatClient], ChatClient] | None = None) -> ClientStack:
    """The run's stacks (see ClientStack); `client`: the default server's backend, else
    the one the settings describe; `wrap`: put over every endpoint's backend (a counter)."""
    return ClientStack(settings, client, needed, wrap)
