"""A loopback server speaking the OpenAI chat-completions protocol, for tests and bench.

It answers from the request itself (the candidates JSON in the ranker prompt, the
description in the rewriter prompt) with the mock model's logic, so rows pass end to end;
a rewriter prompt saying "KEEP it as it is." gets the description back unchanged (a
strategy that loses to the mock's, for comparisons of variants); a model whose name holds
"reversed" ranks the other way round (a judge that disagrees with the others).
A ranker prompt naming `questionable_products` (E-GEO's) gets E-GEO's answer: the
products read from its `[n] title` blocks, those holding a manipulation phrase flagged and
ranked last (the mock's rule), except by a model whose name holds "gullible"; a red-team
attack's rewrite carries the mock's attack line.
Latency and faults are injectable; it records every request (with the requests in flight
when it came, and its body as received in `raw_bodies`) and the most in flight.
With `serial` set it answers one call at a time, as a local CPU model's server does:
latency grows with the queue.

Rate-limit mode (`rate_limit`): at most R requests per second (a token bucket holding
one second's worth, refilled continuously, as providers meter requests per minute) and at
most C in flight (admitted requests, counted until their answer is ready, as a gateway
bounding parallel requests counts them; with no rate, `math.inf`, that cap is the only
limit); beyond either, an immediate 429 with `Retry-After`. With headers
"openai" every answer carries `x-ratelimit-limit/remaining/reset-requests` and a 429 also
`retry-after-ms`, like the real API; with "retry-after" a 429 says only `Retry-After`
(whole seconds, as HTTP defines it) and successes say nothing. With a token limit
(`tokens`, `--tokens`) each request is also charged its prompt's tokens and its output
cap against a bucket of that many tokens a second, and "openai" headers add
`x-ratelimit-limit/remaining/reset-tokens`.

OpenAI's contract for reasoning models (`reasoning_refusal`): for the model names OpenAI
serves as reasoning models, and for those in `refuses_temperature` (an unknown new model),
a `temperature` other than 1 and any `max_tokens` get HTTP 400 with OpenAI's exact error
bodies; `refused` records each refusal as (model, param). Batch API lines are refused the
same way (`batch_answer`).

Usage: each answer reports the tokens of what the server received and sent, counted as
words and punctuation marks (near a BPE tokenizer's count for English) plus OpenAI's chat
formatting (4 tokens a message, 3 priming the answer); `billed` adds up what it reported,
the server's own count a budget test compares with.

Structured answers and the output cap, as OpenAI documents them: a `response_format`
`json_schema` with `strict: true` whose schema leaves an object open (no
`additionalProperties: false`, or a property not in `required`) is refused with OpenAI's
400; a valid one is answered strictly in its shape (bare JSON, the ranking's ids from its
enum). With `refuse_response_format` set, any `response_format` is refused as a server
without it refuses it (400 `unsupported_parameter`). An answer longer than `max_tokens`
(or `max_completion_tokens`), counted as usage counts them, is cut there with
`finish_reason: "length"`. Fault "huge": a rewrite of 2 MiB; "odd_types": a 200 whose
answer and token counts are not text and numbers; "json_as_text": a good answer served as
`text/plain`.

Another wire format (`/messages`, shaped like Anthropic's Messages API: `system` apart,
`max_tokens`, the key in `x-api-key`, the answer in `content[0].text` and usage as
`input_tokens`/`output_tokens`), answered with the same logic: what a provider that does
not speak the OpenAI protocol talks to (llm/providers.py).

Run standalone (the benchmark does, to keep the server off the client's GIL):
    python tests/fake_openai.py --latency 0.1   # prints the port, serves until killed
    python tests/fake_openai.py --latency 0.1 --rate 200 --max-in-flight 100
"""

from __future__ import annotations

import argparse
import base64
import gzip
import json
import math
import random
import re
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from fake_batches import BatchStore

from pytest_geo.llm.mock import ATTACK_LINE, ATTACK_MARK, egeo_ranking, questionable, ranker_order, rewrite

FAULTS = ("ok", "429", "500", "401", "404", "400", "drop", "slow", "malformed", "bad_ranking", "echo_headers",
          "echo_key", "huge", "odd_types", "json_as_text", "context_length",
          "html", "overloaded", "surrogate", "trickle", "endless",
          "gzip_bomb", "raw_surrogate", "trickle_headers")
# Hostile servers (test_server_faults.py): "html", a gateway's page with status 200;
# "overloaded", a chat completion whose text says the service is overloaded; "surrogate", an
# answer holding an escaped lone surrogate (`\ud800`) in the rewrite and as a ranked id
# ("raw_surrogate": in the protocol's JSON, so the answer's text itself holds one); "trickle",
# a body sent a byte every `trickle_seconds` ("trickle_headers": its headers); "endless", a
# chunked body that never ends; "gzip_bomb", a small gzip body that inflates to GZIP_BOMB_BYTES.
GZIP_BOMB_BYTES = 64 << 20
ENDLESS_BYTES = 64 << 20  # an "endless" body ends here, cut (a client without a bound buffers it all)
TRICKLE_SECONDS = 20.0  # a trickled body is cut after this long
HUGE_ANSWER = 2 << 20  # characters of fault "huge"'s rewrite
RANDOM_FAULTS = ("429", "500", "401", "drop", "slow", "malformed", "bad_ranking")  # for fault_rate
QUERY = re.compile(r"^(?:Shopper query|Query): (.*)$", re.MULTILINE)
DESCRIPTION = re.compile(r"^Original description: (.*)$", re.MULTILINE)
KEEP = "KEEP it as it is."  # in a rewriter prompt: answer with the description unchanged
HONEST = object()  # FakeOpenAI.usage_as: the usage counted from the request and the answer
MISSING = object()  # FakeOpenAI.usage_as: the answer has no `usage` at all
GATEWAY_PAGE = b"<html><head><title>502 Bad Gateway</title></head><body><h1>Bad Gateway</h1></body></html>"
REVERSED = "reversed"  # in a model's name: its rankings are the usual ones reversed (a disagreeing judge)
GULLIBLE = "gullible"  # in a model's name: it never flags a product as questionable (E-GEO's answer)
PRODUCT = re.compile(r"^\[([^\]\n]+)\] (.*)$", re.MULTILINE)  # a product's first line in {{products}}


class RateLimit:
    """A token bucket of `rate` requests per second (capacity: one second's worth), a cap
    on requests in flight, and optionally a bucket of `tokens` tokens per second (capacity:
    one second's worth: a provider's tokens a minute, its minute scaled to a second as the
    requests' is), each request charged as OpenAI meters it: its prompt's tokens plus its
    `max_tokens` (else its answer's). `admit` decides one request under the server's lock."""

    def __init__(self, rate: float, max_in_flight: int, headers: str = "openai", window: str = "bucket",
                 retry_after: str | None = None, tokens: float | None = None) -> None:
        assert headers in ("openai", "retry-after"), headers
        assert window in ("bucket", "sliding"), window
        assert math.isfinite(rate) or headers == "retry-after" or tokens is not None, "rate headers need a limit"
        self.rate = rate  # math.inf: no rate, only the cap on requests in flight (and tokens)
        self.max_in_flight = max_in_flight
        self.headers = headers
        # "sliding": at most `rate` admissions in any one-second window (no burst beyond it)
        self.window = window
        self.retry_after = retry_after  # a fixed Retry-After for every 429 ("0.2"), else computed
        self.admitted_at: deque[float] = deque()
        self.tokens = rate
        self.stamp = time.monotonic()
        self.refused = 0
        self.admitted_in_flight = 0  # admitted requests whose answer is not ready yet
        self.busy = 0.0  # admitted requests in flight, integrated over time (request-seconds)
        self._changed = self.stamp
        self.token_rate = tokens  # tokens per second (None: no token limit)
        self.token_budget = tokens or 0.0  # the token bucket's content
        self.charged = 0  # tokens charged to admitted requests
        self.refused_tokens = 0  # of the refusals, those the token bucket made

    def _count(self, change: int) -> None:
        now = time.monotonic()
        self.busy += self.admitted_in_flight * (now - self._changed)
        self._changed = now
        self.admitted_in_flight += change

    def answered(self) -> None:
        self._count(-1)

    def _refill(self, now: float) -> None:
        if self.window == "sliding":
            while self.admitted_at and self.admitted_at[0] <= now - 1.0:
                self.admitted_at.popleft()
            self.tokens = self.rate - len(self.admitted_at)
        else:
            self.tokens = min(self.rate, self.tokens + (now - self.stamp) * self.rate)
        if self.token_rate is not None:
            self.token_budget = min(self.token_rate, self.token_budget + (now - self.stamp) * self.token_rate)
        self.stamp = now

    def admit(self, cost: int = 0) -> tuple[bool, dict[str, str]]:
        """(admitted, headers to send) for a request charged `cost` tokens; an admitted
        request is counted in flight until `answered`."""
        now = time.monotonic()
        self._refill(now)
        short = 0.0 if self.token_rate is None else max(0.0, cost - self.token_budget)
        admitted = self.admitted_in_flight < self.max_in_flight and self.tokens >= 1 and not short
        if admitted:
            self.tokens -= 1
            self.admitted_at.append(now)
            self._count(1)
            if self.token_rate is not None:
                self.token_budget -= cost
                self.charged += cost
        else:
            self.refused += 1
            self.refused_tokens += bool(short)
        wait = max(0.0, (1 - self.tokens) / self.rate) if self.tokens < 1 else 0.0
        if short and self.token_rate:
            wait = max(wait, short / self.token_rate)
        if self.headers == "retry-after":  # whole seconds: the HTTP header's unit
            if admitted:
                return admitted, {}
            return admitted, {"Retry-After": self.retry_after or str(max(1, math.ceil(wait)))}
        headers = {}
        if math.isfinite(self.rate):
            headers.update({
                "x-ratelimit-limit-requests": str(int(self.rate)),
                "x-ratelimit-remaining-requests": str(int(self.tokens)),
                "x-ratelimit-reset-requests": f"{math.ceil((self.rate - self.tokens) / self.rate * 1000)}ms"})
        if self.token_rate is not None:
            left = max(0.0, self.token_budget)
            headers.update({
                "x-ratelimit-limit-tokens": str(int(self.token_rate)),
                "x-ratelimit-remaining-tokens": str(int(left)),
                "x-ratelimit-reset-tokens": f"{math.ceil((self.token_rate - left) / self.token_rate * 1000)}ms"})
        if not admitted:
            wait = max(wait, 0.01)  # in flight full: a slot frees within a round trip
            headers.update({"retry-after-ms": str(math.ceil(wait * 1000)), "retry-after": str(math.ceil(wait))})
        return admitted, headers


def charged_tokens(body: dict[str, Any]) -> int:
    """What a token limit charges a request when it comes (as OpenAI meters it): its
    prompt's tokens plus its output cap (0 without one; the answer is not known yet)."""
    cap = body.get("max_completion_tokens", body.get("max_tokens"))
    return prompt_tokens(body) + (cap if isinstance(cap, int) else 0)


class FakeOpenAI(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256

    def __init__(self, latency: float = 0.0, slow_seconds: float = 2.0) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.latency = latency
        self.slow_seconds = slow_seconds
        self.faults: deque[str] = deque()  # consumed one per request, in order
        self.always: str | None = None  # applied to every request while set
        self.fault_rate = 0.0  # otherwise: this share of requests gets a random fault
        self.rng = random.Random(0)
        self.requests: list[dict[str, Any]] = []
        self.raw_bodies: list[bytes] = []  # each chat request's body as received, in arrival order
        # Wall-clock times (time.time(), comparable with another process's) of the first
        # chat request's arrival and of the last chat answer's end: a bench in another
        # process times a client's start-up and exit against them (`/stats`).
        self.first_request_at: float | None = None
        self.last_answer_at: float | None = None
        self.in_flight = 0
        self.max_in_flight = 0
        self.rate_limit: RateLimit | None = None  # set to limit requests (see RateLimit)
        self.refused_at: list[float] = []  # when rate-limit mode refused a request
        self.batches = BatchStore()  # the Batch API's files and batches (fake_batches.py)
        self.lock = threading.Lock()
        # While set, each request waits (up to `hold_seconds`) until this many have been in
        # flight at once: a test of concurrency then passes on a slow machine as well as a
        # fast one, and fails (slowly) only when the client never sends that many at once.
        self.hold_until = 0
        # The fault for a request chosen from its body (None: the usual rules), so a test can
        # fail one row's calls whatever order the client sends them in.
        self.fault_for: Callable[[dict[str, Any]], str | None] | None = None
        # Requests this returns True for wait `hold_seconds` (or until `released` is set).
        self.holds: Callable[[dict[str, Any]], bool] | None = None
        self.released = threading.Event()
        self.hold_seconds = 10.0
        self.in_flight_grew = threading.Condition(self.lock)
        # OpenAI's reasoning-model contract (reasoning_refusal): models named here refuse
        # temperature and max_tokens as the o-series and gpt-5 do.
        self.refuses_temperature: set[str] = set()
        self.refused: list[tuple[str, str]] = []  # (model, param) of each contract refusal
        # The usage of every chat completion the server answered (not batches), added up.
        self.billed = {"prompt_tokens": 0, "completion_tokens": 0}
        self.billed_cached = 0  # of billed prompt tokens, those reported as cached (cached_share)
        # While set, requests are served one at a time (a local CPU model's server): each
        # waits for the ones before it, so latency grows with the queue.
        self.serial = False
        self.serving = threading.Lock()
        self.thread: threading.Thread | None = None
        self.refuse_response_format = False  # a server without structured outputs
        self.refuse_params: set[str] = set()  # refused with OpenAI's unsupported_parameter 400, naming no other
        # Every chat answer's `usage` replaced by this (MISSING: no usage field at all), and
        # these headers added to every answer: what a server that lies about both sends.
        self.usage_as: Any = HONEST
        self.extra_headers: dict[str, str] = {}
        self.trickle_seconds = 0.5
        # This share of each answer's prompt tokens reported as served by a prompt cache
        # (`usage.prompt_tokens_details.cached_tokens`, as OpenAI reports it).
        self.cached_share = 0.0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def start(self) -> FakeOpenAI:
        self.thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()

    def reset(self) -> None:
        with self.lock:
            self.requests.clear()
            self.raw_bodies.clear()
            self.first_request_at = self.last_answer_at = None
            self.faults.clear()
            self.always = None
            self.max_in_flight = 0
            self.hold_until = 0
            self.holds = None
            self.fault_for = None
            self.refused.clear()
            self.billed = dict.fromkeys(self.billed, 0)
            self.billed_cached = 0
            self.serial = False
            self.refuse_response_format = False
            self.refuse_params = set()
            self.usage_as = HONEST
            self.cached_share = 0.0
            self.extra_headers = {}

    def batch_answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """A Batch API line's status and body: refused as a direct call would be (the
        reasoning-model contract, a response format), else answered."""
        refusal = reasoning_refusal(body, self.refuses_temperature)
        if refusal is not None:
            with self.lock:
                self.refused.append((str(body.get("model")), refusal["error"]["param"]))
            return 400, refusal
        refusal = schema_refusal(self, body)
        if refusal is not None:
            return 400, refusal
        return 200, completion(body)

    def fail_next(self, *faults: str) -> None:
        assert all(f in FAULTS for f in faults), faults
        self.faults.extend(faults)

    def _next_fault(self, body: dict[str, Any]) -> str | None:
        with self.lock:
            if self.fault_for is not None:
                chosen = self.fault_for(body)
                if chosen is not None:
                    return chosen
            if self.faults:
                return self.faults.popleft()
            if self.always is None and self.fault_rate and self.rng.random() < self.fault_rate:
                return self.rng.choice(RANDOM_FAULTS)
            return self.always

    def _admit(self, body: dict[str, Any]) -> tuple[bool, dict[str, str]]:
        """(admitted, rate-limit headers to send) under rate-limit mode; refusals are
        timed in `refused_at`."""
        if self.rate_limit is None:
            return True, {}
        cost = charged_tokens(body) if self.rate_limit.token_rate is not None else 0
        with self.lock:
            verdict = self.rate_limit.admit(cost)
            if not verdict[0]:
                self.refused_at.append(time.monotonic())
            return verdict

    def _enter(self, body: dict[str, Any], headers: dict[str, str]) -> None:
        with self.lock:
            self.in_flight += 1
            if self.first_request_at is None:
                self.first_request_at = time.time()
            self.requests.append({"body": body, "headers": headers, "at": time.monotonic(),
                                  "in_flight": self.in_flight})  # this one included
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            self.in_flight_grew.notify_all()

    def _hold(self) -> None:
        with self.in_flight_grew:
            self.in_flight_grew.wait_for(lambda: self.max_in_flight >= self.hold_until, timeout=self.hold_seconds)

    def _leave(self) -> None:
        with self.lock:
            self.in_flight -= 1

    def _answered(self) -> None:
        """An admitted request's answer is ready: rate-limit mode's cap no longer counts it."""
        with self.lock:
            if self.rate_limit is not None:
                self.rate_limit.answered()


CURRENT_PROMPT = re.compile(r"<<<\n(.*)\n>>>", re.S)  # the meta prompt's current template


def text_of(content: object) -> str:
    """A message's text: the string, or its content parts' texts joined (the protocol's
    other form, which carries a part's `cache_control` mark)."""
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content)


def answer_for(body: dict[str, Any], fault: str | None = None, headers: dict[str, str] | None = None) -> str:
    """The content a sensible model would give, computed from the prompt text.

    `echo_headers`: a usable answer that also quotes every request header (a proxy or
    a model that echoes its input), the Authorization header and its key included.
    `echo_key`: the key in escaped forms only decoding reveals (`key_forms`): in the
    rewrite, or as an extra id of the ranking."""
    messages = body.get("messages", [])
    system = text_of(next((m["content"] for m in messages if m.get("role") == "system"), ""))
    user = text_of(next((m["content"] for m in messages if m.get("role") == "user"), ""))
    if fault == "malformed":
        return "Sorry, I cannot help with ranking today."
    if fault == "overloaded":
        return "The service is overloaded. Please try again later."
    query_match = QUERY.search(user)
    query = query_match.group(1) if query_match else ""
    if "questionable_products" in system + user:
        return json.dumps(egeo_answer(query, _products(user), str(body.get("model", ""))))
    if "ordered_ids" in system:
        ordered = ranker_order({"query": query, "candidates": _candidates(user)})
        if REVERSED in str(body.get("model", "")):  # a judge that sees everything the other way round
            ordered.reverse()
        if fault == "bad_ranking":
            ordered = ordered[1:] + ["zz-unknown"]
        if fault == "surrogate":  # json.dumps writes the lone surrogate as the escape `\ud800`
            return json.dumps({"ordered_ids": [*ordered, "\ud800"]})
        echo = f"You sent {json.dumps(headers)}.\n" if fault == "echo_headers" else ""
        if fault == "echo_key":  # the key, \u-escaped, as one more id
            return '{"ordered_ids": ' + json.dumps(ordered)[:-1] + ', "' + key_forms(_key(headers))[1] + '"]}'
        return echo + "Here you go:\n```json\n" + json.dumps({"ordered_ids": ordered}) + "\n```"
    if '"new_prompt"' in system:  # the meta-optimizer: the current template, one line added
        current = CURRENT_PROMPT.search(user)
        new = (current.group(1) if current else "") + "\nLead with the words of the query."
        return json.dumps({"new_prompt": new, "rationale": "queries match better"})
    description = DESCRIPTION.search(user)
    if KEEP in user:  # a strategy that cannot move its target, for paired comparisons
        return json.dumps({"rewritten_description": description.group(1) if description else ""})
    rewritten = rewrite({"description": description.group(1) if description else ""})
    if ATTACK_MARK in user:
        rewritten += f" {ATTACK_LINE}"
    if fault == "echo_key":  # written inside the JSON string as is: each form decodes to the key
        return '{"rewritten_description": ' + json.dumps(rewritten)[:-1] + " " + " ".join(key_forms(_key(headers))) + '"}'

    if fault == "surrogate":
        rewritten += " \ud800"
    if fault == "echo_headers":
        rewritten += " Headers: " + "; ".join(f"{k}: {v}" for k, v in (headers or {}).items())
    return json.dumps({"rewritten_description": rewritten})


def egeo_answer(query: str, products: list[dict[str, Any]], model: str) -> dict[str, Any]:
    """E-GEO's answer for `products`, as the mock gives it (none flagged by a gullible model)."""
    context = {"query": query, "candidates": products}
    order = ranker_order(context)
    if REVERSED in model:
        order.reverse()
    return egeo_ranking(order, [] if GULLIBLE in model else questionable(context))


def _products(text: str) -> list[dict[str, Any]]:
    """The products of an E-GEO ranker prompt ({{products}}, the prompt's last part): each
    `[id] title` line, and the lines up to the next as its description."""
    marks = list(PRODUCT.finditer(text))
    ends = [m.start() for m in marks[1:]] + [len(text)]
    return [{"id": m[1], "title": m[2], "description": text[m.end():end].strip()} for m, end in zip(marks, ends, strict=True)]


# OpenAI's reasoning models as its API names them (dated snapshots included).
REASONING_MODEL = re.compile(r"(?:o1|o3|o4)(?:-mini|-pro)?(?:-\d{4}-\d{2}-\d{2})?|gpt-5(?:-mini|-nano)?(?:-\d{4}-\d{2}-\d{2})?")


def reasoning_refusal(body: dict[str, Any], refuses_temperature: set[str] = frozenset()) -> dict[str, Any] | None:
    """OpenAI's 400 for a reasoning model sent `max_tokens` or a temperature other than its
    default (1), with the documented error body; None when the request is acceptable."""
    model = str(body.get("model", ""))
    if not (REASONING_MODEL.fullmatch(model) or model in refuses_temperature):
        return None
    temperature = body.get("temperature")
    if temperature is not None and temperature != 1:
        value = f"{temperature:g}" if isinstance(temperature, (int, float)) else json.dumps(temperature)
        return {"error": {"message": f"Unsupported value: 'temperature' does not support {value} with this model. "
                                     "Only the default (1) value is supported.",
                          "type": "invalid_request_error", "param": "temperature", "code": "unsupported_value"}}
    if "max_tokens" in body and REASONING_MODEL.fullmatch(model):
        return {"error": {"message": "Unsupported parameter: 'max_tokens' is not supported with this model. "
                                     "Use 'max_completion_tokens' instead.",
                          "type": "invalid_request_error", "param": "max_tokens", "code": "unsupported_parameter"}}
    return None


TOKEN = re.compile(r"\w+|[^\w\s]")  # a word or a punctuation mark


def count_tokens(text: str) -> int:
    return len(TOKEN.findall(text))


def prompt_tokens(body: dict[str, Any]) -> int:
    """Each message's text, 4 tokens of chat format around it, 3 priming the answer."""
    return 3 + sum(4 + count_tokens(text_of(m.get("content", ""))) for m in body.get("messages", []))


def _key(headers: dict[str, str] | None) -> str:
    return (headers or {}).get("authorization", "").removeprefix("Bearer ")


def key_forms(key: str) -> list[str]:
    """`key` as JSON-string text that decodes to it, or shows it once decoded again:
    `\\/` for `/`, every character `\\uXXXX`, `\\u0070` for `p` only, HTML character
    references, URL percent-encoding, base64 in a Basic credential, a doubled JSON escape."""
    def every(template: str) -> str:
        return "".join(template.format(ord(c)) for c in key)
    basic = base64.b64encode(f"user:{key}".encode()).decode()
    return [key.replace("/", "\\/"), every("\\u{:04X}"), key.replace("p", "\\u0070"), every("&#{};"),
            every("&#x{:x};"), every("%{:02X}"), f"Basic {basic}", key.replace("p", "\\\\u0070")]


BLOCK = re.compile(r"^- id: (.*)\n  title: (.*)\n  description:\n((?:  .*(?:\n|$))*)", re.MULTILINE)


def completion(body: dict[str, Any], fault: str | None = None, number: int = 0,
               headers: dict[str, str] | None = None) -> dict[str, Any]:
    """A chat.completion object answering `body`, with usage counted from what it holds."""
    structured = structured_answer(body) if fault is None else None
    content = structured if structured is not None else answer_for(body, fault, headers)
    if fault == "huge":
        content = json.dumps({"rewritten_description": "x" * HUGE_ANSWER})
    if fault == "raw_surrogate":
        content += "\ud800"
    content, finish_reason = cut_at_cap(content, body)
    prompt, answer = prompt_tokens(body), count_tokens(content)
    return {
        "id": f"chatcmpl-{number}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", "fake"),
        "choices": [{"index": 0, "finish_reason": finish_reason,
                     "message": {"role": "assistant", "content": content}}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": answer, "total_tokens": prompt + answer},
    }


def structured_answer(body: dict[str, Any]) -> str | None:
    """With a `json_schema` response format: what `answer_for` says, in exactly the
    schema's shape (bare JSON, every property; a ranking holds the enum's ids, the
    answer's order first), else None."""
    response_format = body.get("response_format")
    if not isinstance(response_format, dict) or response_format.get("type") != "json_schema":
        return None
    properties = response_format["json_schema"]["schema"].get("properties", {})
    content = answer_for(body)
    said = json.loads(content[content.index("{"):content.rindex("}") + 1])  # the one object it holds
    answer = {name: said.get(name, "") for name in properties}
    if "ordered_ids" in properties:
        allowed = properties["ordered_ids"]["items"].get("enum")
        ordered = list(said.get("ordered_ids") or allowed or [])
        if allowed is not None:
            ordered = [i for i in ordered if i in allowed] + [i for i in allowed if i not in ordered]
        answer["ordered_ids"] = ordered
    return json.dumps(answer)


def schema_refusal(server: FakeOpenAI, body: dict[str, Any]) -> dict[str, Any] | None:
    """OpenAI's 400 body refusing the request's response format, or None: refused
    outright in `refuse_response_format` mode, else a strict schema leaving an object open."""
    response_format = body.get("response_format")
    if response_format is None:
        return None
    if server.refuse_response_format:
        return {"error": {"message": "Unsupported parameter: 'response_format' is not supported with this model.",
                          "type": "invalid_request_error", "param": "response_format",
                          "code": "unsupported_parameter"}}
    spec = response_format.get("json_schema") or {}
    if response_format.get("type") != "json_schema" or not spec.get("strict"):
        return None
    problem = open_object(spec.get("schema") or {}, ())
    if problem is None:
        return None
    return {"error": {"message": f"Invalid schema for response_format '{spec.get('name')}': {problem}",
                      "type": "invalid_request_error", "param": "response_format", "code": None}}


def open_object(schema: dict[str, Any], context: tuple[str, ...]) -> str | None:
    """Where a strict schema leaves an object open, in OpenAI's words; None if nowhere."""
    if schema.get("type") == "object" or "properties" in schema:
        if schema.get("additionalProperties") is not False:
            return f"In context={context}, 'additionalProperties' is required to be supplied and to be false."
        properties = schema.get("properties", {})
        missing = [name for name in properties if name not in (schema.get("required") or [])]
        if missing:
            return (f"In context={context}, 'required' is required to be supplied and to be an array including "
                    f"every key in properties. Missing '{missing[0]}'.")
        for name, inner in properties.items():
            problem = open_object(inner, (*context, "properties", name))
            if problem is not None:
                return problem
    if isinstance(schema.get("items"), dict):
        return open_object(schema["items"], (*context, "items"))
    return None


def cut_at_cap(content: str, body: dict[str, Any]) -> tuple[str, str]:
    """(content, finish_reason): cut after the request's output cap of tokens, counted as
    usage counts them."""
    cap = body.get("max_completion_tokens") or body.get("max_tokens")
    if not isinstance(cap, int):
        return content, "stop"
    for number, token in enumerate(TOKEN.finditer(content), 1):
        if number > cap:
            return content[:token.start()].rstrip(), "length"
    return content, "stop"


def _candidates(text: str) -> list[dict[str, Any]]:
    """The candidates in a ranker prompt: a JSON array ({{candidates_json}}), JSON lines
    ({{candidates_jsonl}}) or the E-GEO harness's blocks ({{candidates}})."""
    blocks = [{"id": m[1], "title": m[2], "description": "\n".join(line[2:] for line in m[3].splitlines())}
              for m in BLOCK.finditer(text)]
    if blocks:
        return blocks
    lines = [_object(line) for line in text.splitlines()]
    listed = [line for line in lines if line is not None and "id" in line]
    return listed or _json_array(text)


def _object(line: str) -> dict[str, Any] | None:
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _json_array(text: str) -> list[dict[str, Any]]:
    decoder = json.JSONDecoder()
    for match in re.finditer(r"\[", text):
        try:
            value, _ = decoder.raw_decode(text, match.start())
        except ValueError:
            continue
        if isinstance(value, list) and value and all(isinstance(v, dict) and "id" in v for v in value):
            return value
    return []


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # else headers and body wait on delayed ACKs (40 ms a call)
    server: FakeOpenAI

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        """`/stats`: what the server saw, for a client in another process (the bench);
        the Batch API's reads."""
        parts = self.path.split("?")[0].rstrip("/").split("/")
        if parts[-2:-1] == ["batches"]:
            found = self.server.batches.retrieve(parts[-1], self.server.batch_answer)
            self._send(200, found) if found else self._not_found()
        elif parts[-3:-2] == ["files"] and parts[-1] == "content":
            data = self.server.batches.content(parts[-2])
            self._send_bytes(200, data) if data is not None else self._not_found()
        elif self.path.rstrip("/").endswith("/stats"):
            with self.server.lock:
                limit = self.server.rate_limit
                stats = {"requests": len(self.server.requests), "max_in_flight": self.server.max_in_flight,
                         "rate_limited": limit.refused if limit is not None else 0,
                         "busy_seconds": limit.busy if limit is not None else 0.0, **self.server.billed,
                         "charged_tokens": limit.charged if limit is not None else 0,
                         "refused_for_tokens": limit.refused_tokens if limit is not None else 0,
                         "first_request_at": self.server.first_request_at,
                         "last_answer_at": self.server.last_answer_at,
                         # time.monotonic(), which a process on the same machine shares: a trace's timeline
                         "arrived_at": [r["at"] for r in self.server.requests], "refused_at": self.server.refused_at}
            self._send(200, stats)
        else:
            self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

    def _not_found(self) -> None:
        self._send(404, {"error": {"message": f"no such object: {self.path}", "type": "invalid_request_error"}})

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        length = int(self.headers.get("Content-Length", "0"))
        raw = self.rfile.read(length)
        parts = self.path.split("?")[0].rstrip("/").split("/")
        if parts[-1] == "files":
            self._send(200, self.server.batches.upload(self.headers.get("Content-Type", ""), raw))
            return
        if parts[-1] == "batches":
            self._send(*self.server.batches.create(json.loads(raw or b"{}")))
            return
        if parts[-1] == "cancel" and parts[-3:-2] == ["batches"]:
            found = self.server.batches.cancel(parts[-2])
            self._send(200, found) if found else self._not_found()
            return
        try:
            body = json.loads(raw)
        except ValueError:
            body = {}
        server = self.server
        admitted, limit_headers = server._admit(body)
        answered = not admitted
        with server.lock:
            server.raw_bodies.append(raw)
        # The path rides as HTTP/2's pseudo-header does: which wire format a request used.
        server._enter(body, {k.lower(): v for k, v in self.headers.items()} | {":path": self.path})
        try:
            if not admitted:
                self._send(429, {"error": {"message": "Rate limit reached for requests", "type": "requests",
                                           "code": "rate_limit_exceeded"}}, limit_headers)
                return
            fault = server._next_fault(body)
            fault = None if fault == "ok" else fault
            if server.hold_until:
                server._hold()
            if server.holds is not None and server.holds(body):
                server.released.wait(server.hold_seconds)
            if server.serial:
                with server.serving:
                    time.sleep(server.latency)
            elif server.latency:
                time.sleep(server.latency)
            server._answered()
            answered = True
            if parts[-1] == "messages":
                self._messages(body, fault)
                return
            if fault == "drop":
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            if fault == "slow":
                time.sleep(server.slow_seconds)
            if fault == "429":
                self._send(429, {"error": {"message": "rate limited", "type": "rate_limit"}},
                           {"Retry-After": "0.1", **server.extra_headers})
                return
            if fault == "401":  # like OpenAI: the error echoes the key it was given
                given = self.headers.get("Authorization", "").removeprefix("Bearer ")
                self._send(401, {"error": {"message": f"Incorrect API key provided: {given}.", "type": "auth"}})
                return
            if fault == "404":  # like OpenAI for a model that does not exist
                self._send(404, {"error": {"message": f"The model `{body.get('model')}` does not exist",
                                           "type": "invalid_request_error", "code": "model_not_found"}})
                return
            refusal = reasoning_refusal(body, server.refuses_temperature)
            if refusal is not None:
                with server.lock:
                    server.refused.append((str(body.get("model")), refusal["error"]["param"]))
                self._send(400, refusal)
                return
            refused = next((param for param in sorted(server.refuse_params) if param in body), None)
            if refused is not None:
                with server.lock:
                    server.refused.append((str(body.get("model")), refused))
                self._send(400, {"error": {"message": f"Unsupported parameter: '{refused}' is not supported with "
                                                      "this model.", "type": "invalid_request_error",
                                           "param": refused, "code": "unsupported_parameter"}})
                return
            if fault == "400":  # a request no change of parameters fixes, as OpenAI words one
                self._send(400, {"error": {"message": "Unrecognized request argument supplied: stream_mode",
                                           "type": "invalid_request_error", "param": None, "code": None}})
                return
            if fault == "context_length":  # one row's prompt too long, as OpenAI words it
                self._send(400, {"error": {"message": "This model's maximum context length is 128000 tokens. However, "
                                                      "your messages resulted in 200000 tokens.",
                                           "type": "invalid_request_error", "param": "messages",
                                           "code": "context_length_exceeded"}})
                return
            if fault == "500":
                self._send(500, {"error": {"message": "upstream exploded", "type": "server_error"}},
                           {"retry-after-ms": "20"})
                return
            refusal = schema_refusal(server, body)
            if refusal is not None:
                self._send(400, refusal)
                return
            if fault in ("html", "trickle", "endless", "gzip_bomb", "trickle_headers"):
                self._hostile_body(fault)
                return
            if fault == "odd_types":  # a 200 whose fields are not of their types
                self._send(200, {"choices": [{"message": {"content": ["not", "text"]}, "finish_reason": 7}],
                                 "usage": {"prompt_tokens": "12", "completion_tokens": True}})
                return
            headers = {k.lower(): v for k, v in self.headers.items()}
            answer = completion(body, fault, len(server.requests), headers)
            if fault == "json_as_text":  # a good answer, served as text/plain as some proxies do
                self._send_bytes(200, json.dumps(answer).encode("utf-8"), content_type="text/plain")
                return
            with server.lock:
                for name in server.billed:
                    server.billed[name] += answer["usage"][name]
            if server.cached_share:
                cached = int(answer["usage"]["prompt_tokens"] * server.cached_share)
                answer["usage"]["prompt_tokens_details"] = {"cached_tokens": cached}
                with server.lock:
                    server.billed_cached += cached
            if server.usage_as is MISSING:
                del answer["usage"]
            elif server.usage_as is not HONEST:
                answer["usage"] = server.usage_as
            self._send(200, answer, {**limit_headers, **server.extra_headers})
        except (BrokenPipeError, ConnectionResetError, OSError):
            self.close_connection = True
        finally:
            if not answered:
                server._answered()
            server._leave()

    def _hostile_body(self, fault: str) -> None:
        """A 200 no client should buffer whole or wait for: see FAULTS."""
        if fault == "html":
            self._send_bytes(200, GATEWAY_PAGE, content_type="text/html")
            return
        self.close_connection = True  # the body is cut, never ended
        if fault == "trickle_headers":
            self.wfile.write(b"HTTP/1.1 200 OK\r\nX-Slow: ")
            until = time.monotonic() + TRICKLE_SECONDS
            while time.monotonic() < until:
                self.wfile.write(b"a")
                self.wfile.flush()
                time.sleep(self.server.trickle_seconds)
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        if fault == "gzip_bomb":
            data = gzip_bomb()
            self.send_header("Content-Encoding", "gzip")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self.close_connection = True  # the body is cut, never ended
        if fault == "trickle":  # a byte at a time: no read of the socket ever waits long
            self.send_header("Content-Length", "100000")
            self.end_headers()
            until = time.monotonic() + TRICKLE_SECONDS
            while time.monotonic() < until:
                self.wfile.write(b" ")
                self.wfile.flush()
                time.sleep(self.server.trickle_seconds)
            return
        self.send_header("Transfer-Encoding", "chunked")  # endless
        self.end_headers()
        chunk = b"x" * 65536
        for _ in range(ENDLESS_BYTES // len(chunk)):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))

    def _messages(self, body: dict[str, Any], fault: str | None) -> None:
        """The `/messages` wire format (see the module)."""
        if fault == "500":
            self._send(500, {"type": "error", "error": {"type": "api_error", "message": "overloaded"}})
            return
        system = [{"role": "system", "content": body["system"]}] if body.get("system") else []
        chat = {"model": body.get("model"), "messages": system + list(body.get("messages", [])),
                "max_tokens": body.get("max_tokens")}
        answer = completion(chat)
        self._send(200, {"type": "message", "role": "assistant", "model": body.get("model"),
                         "content": [{"type": "text", "text": answer["choices"][0]["message"]["content"]}],
                         "stop_reason": "end_turn",
                         "usage": {"input_tokens": answer["usage"]["prompt_tokens"],
                                   "output_tokens": answer["usage"]["completion_tokens"]}})

    def _send(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        self._send_bytes(status, json.dumps(payload).encode("utf-8"), headers, "application/json")

    def _send_bytes(self, status: int, data: bytes, headers: dict[str, str] | None = None,
                    content_type: str = "application/octet-stream") -> None:
        if self.path.split("?")[0].rstrip("/").endswith("chat/completions"):
            # stamped before the bytes go: once they are out the client may return first
            self.server.last_answer_at = time.time()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)


_bomb: list[bytes] = []


def gzip_bomb() -> bytes:
    """GZIP_BOMB_BYTES of spaces, gzipped (about a thousandth of that), made once."""
    if not _bomb:
        _bomb.append(gzip.compress(b" " * GZIP_BOMB_BYTES, compresslevel=9))
    return _bomb[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--latency", type=float, default=0.1)
    parser.add_argument("--rate", type=float, default=None, help="rate-limit mode: requests per second")
    parser.add_argument("--max-in-flight", type=int, default=None,
                        help="rate-limit mode: requests in flight (alone: no rate, only this cap)")
    parser.add_argument("--rate-headers", choices=("openai", "retry-after"), default="openai")
    parser.add_argument("--window", choices=("bucket", "sliding"), default="bucket",
                        help="rate-limit mode: a token bucket, or at most R in any one-second window")
    parser.add_argument("--retry-after", default=None, help="rate-limit mode: every 429's Retry-After")
    parser.add_argument("--tokens", type=float, default=None,
                        help="rate-limit mode: tokens per second (a minute's limit, scaled to a second)")
    args = parser.parse_args()
    server = FakeOpenAI(latency=args.latency)
    if args.rate is not None or args.max_in_flight is not None or args.tokens is not None:
        rate = math.inf if args.rate is None else args.rate
        in_flight = 10**9 if args.max_in_flight is None else args.max_in_flight
        server.rate_limit = RateLimit(rate, in_flight, args.rate_headers, args.window, args.retry_after, args.tokens)
    print(server.server_address[1], flush=True)
    try:
        server.serve_forever(poll_interval=0.05)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
