"""Chat completions through the real `openai` SDK, against any OpenAI-compatible server.

Retries are the SDK's own (``max_retries``): it retries 408/409/429/5xx, timeouts and
dropped connections with exponential backoff and jitter and honours ``Retry-After``.
We only count them: the SDK stamps every attempt with an ``x-stainless-retry-count``
header, which an httpx request hook reads into a per-call context variable.
"""

from __future__ import annotations

import contextvars
import json
import re
import socket
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, NamedTuple

import openai

from pytest_geo.llm import bounded_body, redaction
from pytest_geo.llm.base import ChatRequest, ChatResponse, ModelError, RequestRefused, is_token_count
from pytest_geo.llm.profiles import Refusal, sent_json
from pytest_geo.settings import DEFAULT_BASE_URL
from pytest_geo.text import shorten

RETRY_HEADER = "x-stainless-retry-count"
CHAT_PATH = b"chat/completions"
MAX_DETAIL = 120
MAX_REFUSAL = 1000  # a 400's message, read for the parameter it names
KEY_LIKE = re.compile(r"\b(sk|key|token)-[A-Za-z0-9_*.\-]{4,}", re.IGNORECASE)

# Attempts seen by the HTTP layer for the call running in this task (each task that
# awaits `complete` gets its own value; calls within one task are sequential).
_attempts: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar("geo_attempts", default=None)


def _count_attempt(request: Any) -> None:
    attempts = _attempts.get()
    if attempts is not None:
        try:
            attempts.append(int(request.headers.get(RETRY_HEADER, "0")))
        except ValueError:
            attempts.append(len(attempts))


# Status and headers of one HTTP response; may return a wait to finish before the SDK
# goes on (a refused request queueing for its next slot).
ResponseObserver = Callable[[int, Mapping[str, str]], Awaitable[None] | None]
# Asked before each request is sent; may return a wait to finish first (a server's pause).
RequestGate = Callable[[], Awaitable[None] | None]
RETRY_NOW_MS = "1"


def _http_client(on_request: Callable[[Any], Any], on_response: Callable[[Any], Any]) -> Any:
    """The SDK's aiohttp transport when installed (the `openai[aiohttp]` extra we depend
    on): httpcore's pool costs more CPU per request, which at high concurrency makes the
    client, not the server, the bottleneck (README, "Concurrency")."""
    hooks: dict[str, list[Callable[[Any], Any]]] = {"request": [on_request], "response": [on_response]}
    try:
        return openai.DefaultAioHttpClient(event_hooks=hooks)
    except RuntimeError:  # aiohttp is missing: httpx works, only slower
        return openai.DefaultAsyncHttpxClient(event_hooks=hooks)


class OpenAIChatClient:
    def __init__(
        self,
        api_key: str,
        base_url: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 4,
    ) -> None:
        self.base_url = (base_url or DEFAULT_BASE_URL).rstrip("/")
        self.timeout = timeout
        self.max_retries = max_retries
        self._secret = api_key
        self._reached = False  # has the server answered a call yet (see _post_first)
        self._observer: ResponseObserver | None = None
        self._gate: RequestGate | None = None
        http = _http_client(self._on_request, self._on_response)
        self._client = openai.AsyncOpenAI(
            api_key=api_key, base_url=self.base_url, timeout=timeout, max_retries=max_retries, http_client=http
        )
        # The endpoint's URL, joined to the SDK's base URL once as the SDK joins a path to
        # it: posted whole, the SDK need not parse and join it again on every call.
        base = self._client.base_url
        self._endpoint = str(base.copy_with(raw_path=base.raw_path + CHAT_PATH))

    @property
    def sdk(self) -> openai.AsyncOpenAI:
        """The SDK client, for the Batch API (llm/batch.py)."""
        return self._client

    def describe(self, exc: BaseException) -> str:
        """One scrubbed line naming what went wrong, for callers outside `complete`."""
        if isinstance(exc, openai.APIError):
            return self._cause(exc)
        return self.scrub(f"{type(exc).__name__}: {exc}")

    def observe_responses(self, observer: ResponseObserver) -> None:
        """Hand every HTTP response's status and headers (case-insensitive names) to
        `observer`, the SDK's retried 429s included: what --geo-concurrency auto adapts to."""
        self._observer = observer

    def hold_requests(self, gate: RequestGate) -> None:
        """Ask `gate` before each request (retries included) goes out, and wait as it
        says: a request that got its slot before a 429's pause began still waits out the
        pause instead of being refused with the rest."""
        self._gate = gate

    async def _on_request(self, request: Any) -> None:
        _count_attempt(request)
        wait = self._gate() if self._gate is not None else None
        if wait is not None:
            await wait
        bounded_body.attempt_started()

    async def _on_response(self, response: Any) -> None:
        wait = self._observer(response.status_code, response.headers) if self._observer is not None else None
        if wait is not None:
            bounded_body.paused()
            await wait
            bounded_body.attempt_started()
            # The observer waited out the server's Retry-After (for every request, not only
            # this one): the SDK, which reads retry-after-ms first, need not sleep it again.
            response.headers["retry-after-ms"] = RETRY_NOW_MS
        bounded_body.bound_body(response)

    async def complete(self, request: ChatRequest) -> ChatResponse:
        attempts: list[int] = []
        token = _attempts.set(attempts)
        try:
            async with bounded_body.bounded_call(self.timeout):
                completion: Any = await self._post_first(request) if not self._reached else await self._post(request)
        except TimeoutError:  # headers trickled past the backstop (llm/bounded_body.py)
            retries, after = _retries(attempts), bounded_body.backstop(self.timeout)
            raise ModelError(f"{request.role} model call failed: timed out after {after:g}s (the answer's headers "
                             f"had not arrived){_after(retries)}", retries=retries, transport=True) from None
        except bounded_body.AnswerTooLarge as exc:
            raise ModelError(f"{request.role} model call failed: the answer was too large ({exc})",
                             retries=_retries(attempts)) from None
        except openai.APIError as exc:
            retries = _retries(attempts)
            failure = f"{request.role} model call failed: {self._cause(exc)}{_after(retries)}"
            if isinstance(exc, openai.APIStatusError) and exc.status_code == 400:
                raise RequestRefused(failure, self.refusal(exc.body), retries=retries) from None
            raise ModelError(failure, retries=retries, fatal=_fatal(exc), transport=_transport(exc)) from None
        finally:
            try:
                _attempts.reset(token)
            except ValueError:  # closed outside its task (a loop shut down mid-call): no count to keep
                pass
        try:
            fields = completion_fields(completion)
        except NotAnAnswer as exc:
            why = self.scrub(str(exc), MAX_REFUSAL)
            raise ModelError(f"{request.role} model call failed: {why}", retries=_retries(attempts),
                             transport=not exc.protocol) from None
        return ChatResponse(
            # An answer can quote the request (a proxy echoing headers, a model shown the
            # key): it goes to the terminal, reports and the cache, so the key never does.
            text=self.redact(fields.text),
            prompt_tokens=fields.prompt_tokens,
            completion_tokens=fields.completion_tokens,
            retries=_retries(attempts),
            finish_reason=fields.finish_reason,
            usage_reported=fields.usage_reported,
            cached_input_tokens=fields.cached_input_tokens,
            cache_write_tokens=fields.cache_write_tokens,
        )

    async def _post(self, request: ChatRequest, retries: int | None = None) -> Any:
        # `post` rather than `chat.completions.create`: the same SDK request (auth,
        # retries, errors), without create()'s TypedDict transform of the messages, which
        # walks every variant of the message union and was the largest CPU cost per call
        # (our messages are plain text). The body goes as the bytes the answer cache keyed
        # on (`sent_json`: the SDK's own encoding, keys sorted), not encoded a second time.
        # `cast_to=object`: the SDK hands back the decoded JSON as it is, and the four
        # fields read from it (`completion_fields`) skip building a `ChatCompletion` model
        # of every field of the answer.
        completion = await self._client.post(
            self._endpoint,
            content=sent_json(request),
            cast_to=object,
            options={} if retries is None else {"max_retries": retries},
        )
        self._reached = True
        return completion

    async def _post_first(self, request: ChatRequest) -> Any:
        """Until the server has answered once, try each call without the SDK's retries
        first: a closed port, an unknown host, a refused key or an unknown model fails in
        milliseconds instead of after every backoff. Anything else gets its retries."""
        try:
            return await self._post(request, retries=0)
        except openai.APIError as exc:
            if isinstance(exc, openai.APIStatusError):
                self._reached = True
            if _fatal(exc) is not None or self.max_retries == 0 or _refused(exc):
                raise
        return await self._post(request, retries=self.max_retries - 1)

    def _cause(self, exc: openai.APIError) -> str:
        """One line naming what went wrong, with the key (and anything key-like) removed."""
        dropped = _aiohttp_disconnect(exc)
        if dropped is not None:
            return f"connection error ({self.scrub(str(dropped) or type(dropped).__name__)})"
        if isinstance(exc, openai.APITimeoutError):
            return f"timed out after {self.timeout:g}s"
        if isinstance(exc, openai.APIConnectionError):
            return f"connection error ({self.scrub(str(exc.__cause__ or exc) or type(exc.__cause__).__name__)})"
        if isinstance(exc, openai.APIStatusError):
            detail = getattr(exc, "body", None)
            if isinstance(detail, dict):
                detail = detail.get("message", detail)
            text = f"HTTP {exc.status_code}"
            return f"{text} ({self.scrub(str(detail))})" if detail else text
        return self.scrub(f"{type(exc).__name__}: {exc}")

    def redact(self, text: str) -> str:
        """`text` with the key, and anything shaped like a secret key, replaced by `[key]`,
        as written and in the escaped forms decoding the answer would undo (redaction.py)."""
        return redaction.redact(text, self._secret, redaction.SECRET_KEY_LIKE)

    def scrub(self, text: str, limit: int = MAX_DETAIL) -> str:
        """One line for an error message: the key and key-like tokens replaced (in every
        form, as in `redact`), shortened."""
        flat = " ".join(redaction.redact(text, self._secret, KEY_LIKE).split())
        return shorten(flat, limit)

    def refusal(self, body: object) -> Refusal:
        """A 400's error object (a direct call's, or a batch line's), its message scrubbed
        as an error message's, kept long enough to read the parameter it names."""
        refusal = Refusal.from_body(body)
        return Refusal(self.scrub(refusal.message, MAX_REFUSAL), refusal.param, refusal.code)

    async def aclose(self) -> None:
        await self._client.close()


class NotAnAnswer(ValueError):
    """A 200 that cannot be used as an answer. `protocol` False: not a chat completion at
    all (a gateway's page, a proxy's "overloaded"): the server does not speak the protocol,
    which the breaker counts as it counts a dead server; True: a chat completion whose text
    is not text (a lone surrogate, which no encoder downstream can write)."""

    def __init__(self, why: str, protocol: bool) -> None:
        super().__init__(why)
        self.protocol = protocol


LONE_SURROGATE = re.compile("[\ud800-\udfff]")
PREVIEW = 60


class Completion(NamedTuple):
    """What is read from a chat completion (`completion_fields`)."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str | None
    usage_reported: bool
    cached_input_tokens: int  # of the prompt tokens, those the provider's prompt cache served
    cache_write_tokens: int  # of the others, those written to a cache the request asked for


def completion_fields(completion: object) -> Completion:
    """The answer's text, token counts, finish reason, and whether the server reported its
    usage, read from a chat completion's JSON (a server's, so untrusted). A field not of its
    type reads as none (no text, no finish reason); token counts that are not believable
    (`is_token_count`) read as 0, with usage not reported, so the call is charged what was
    reserved for it and its cost is unknown; cached input tokens (OpenAI's
    `usage.prompt_tokens_details.cached_tokens`) count only when at most the prompt's, and
    cache-write tokens (OpenRouter's `cache_write_tokens` there) only when at most the rest.
    Raises NotAnAnswer for a body that is not a chat completion, or text holding a lone
    surrogate."""
    raw = completion
    if isinstance(completion, (str, bytes)):  # JSON served under another content type, or not JSON
        try:
            completion = json.loads(completion)
        except ValueError:
            completion = None
    choices = completion.get("choices") if isinstance(completion, dict) else None
    first = choices[0] if isinstance(choices, list) and choices else None
    message = first.get("message") if isinstance(first, dict) else None
    if not isinstance(first, dict) or not isinstance(message, dict) or not isinstance(completion, dict):
        raise NotAnAnswer(f"the server's answer is not a chat completion: {_preview(raw)}", protocol=False)
    text = message.get("content")
    text = text if isinstance(text, str) else ""
    if not text.isascii() and LONE_SURROGATE.search(text):
        raise NotAnAnswer("the answer is not valid text (it holds a lone surrogate, such as \\ud800)", protocol=True)
    usage = completion.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    prompt, answer = usage.get("prompt_tokens"), usage.get("completion_tokens")
    finish = first.get("finish_reason")
    finish = finish if isinstance(finish, str) else None
    if not (is_token_count(prompt) and is_token_count(answer)):
        return Completion(text, 0, 0, finish, False, 0, 0)
    details = usage.get("prompt_tokens_details")
    details = details if isinstance(details, dict) else {}
    cached, written = details.get("cached_tokens"), details.get("cache_write_tokens")  # OpenRouter's name
    cached = cached if is_token_count(cached) and cached <= prompt else 0
    written = written if is_token_count(written) and written <= prompt - cached else 0
    return Completion(text, prompt, answer, finish, True, cached, written)


def _preview(raw: object) -> str:
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    return repr(shorten(" ".join(LONE_SURROGATE.sub("?", text).split()), PREVIEW))


FATAL_STATUS = {401: "the key was refused", 403: "the key was refused", 404: "model or endpoint not found"}


def _fatal(exc: openai.APIError) -> str | None:
    """Failures no retry fixes: the server cannot be reached (connection refused, unknown
    host), refuses the key, or does not know the model or path."""
    if isinstance(exc, openai.APIStatusError):
        return FATAL_STATUS.get(exc.status_code)
    seen: BaseException | None = exc
    for _ in range(10):
        if seen is None:
            return None
        if isinstance(seen, (ConnectionRefusedError, socket.gaierror)):
            return "cannot connect"
        if type(seen).__name__ in ("ClientConnectorError", "ClientConnectorDNSError", "ConnectError"):
            return "cannot connect"
        seen = seen.__cause__ or seen.__context__
    return None


def _refused(exc: openai.APIError) -> bool:
    """A request the server refused as sent (400, 422, ...): sending it again gets the
    same answer (the SDK does not retry these either)."""
    return isinstance(exc, openai.APIStatusError) and exc.status_code < 500 and exc.status_code not in (408, 409, 429)


def _transport(exc: openai.APIError) -> bool:
    """A failure of the server, not of its answer: what the circuit breaker counts."""
    if isinstance(exc, openai.APIStatusError):
        return exc.status_code == 429 or exc.status_code >= 500
    return isinstance(exc, (openai.APIConnectionError, openai.APITimeoutError))


def _retries(attempts: list[int]) -> int:
    """Attempts the HTTP layer saw, less the first: a first call tried once without the
    SDK's retries (`_post_first`) and then with them counts as one client-side call."""
    return max(len(attempts) - 1, 0)


def _after(retries: int) -> str:
    return f" after {retries} {'retry' if retries == 1 else 'retries'}" if retries else ""


def _aiohttp_disconnect(exc: BaseException) -> BaseException | None:
    """The aiohttp transport reports any connection error (a dropped connection too) as
    a connect timeout; find the real cause so the message names it."""
    seen = exc.__cause__ or exc.__context__
    for _ in range(10):
        if seen is None:
            return None
        if type(seen).__module__.startswith("aiohttp") and not isinstance(seen, TimeoutError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None
