"""`--geo-concurrency auto`: rows in flight follow what the provider accepts (AIMD).

Providers limit requests per second and tokens per minute, not the client's CPU, and
the limit is unknown in advance. So, as TCP does with a network's capacity:

- slow start: from a modest START (16, the old fixed default; 1 for a local server),
  each successful call adds 2/3 of a row (doubling the requests in flight per round trip)
  up to START rows, and 1/3 of a row beyond (half again per round trip), until the first
  sign of pressure, or until three round trips buy no more throughput (a full pipe, as
  TCP BBR's start-up finds it: then twice what the best round needed). START is where a
  hosted run opens; past it the limit is unknown, and overshooting a rate limit that says
  nothing before its first 429 costs every request sent until that 429 is read: a client
  that doubles there reaches its own CPU's limit within a few round trips, where it reads
  the 429 tens of milliseconds late, with dozens more sent (and connections opened for
  them) meanwhile;
- then additive increase: about one row per round trip (1/limit per successful call);
- no growth while the client's own event loop runs late (llm/loop_lag.py): it is its
  own bottleneck then;
- calls sent under the current limit taking twice as long as the fastest seen trim the
  limit by a tenth, once per window, like a nearly spent budget: the server is queueing
  them, and more rows in flight would only lengthen the queue;
- calls taking four times as long: the server is saturated (a local model's server
  answering one call at a time), so the limit drops at once to twice what it serves
  without queueing (its throughput times the fastest latency, Little's law): a tenth a
  window would take minutes at 10 s a call. Both rules read a call's time less how late
  the event loop ran meanwhile: a busy client's delay is its own, not the server's;
- a 429 halves the limit, once per window (the requests in flight when it was cut
  carry no news about the new limit), and holds new requests back for the server's
  `Retry-After` (`retry-after-ms`, else `retry-after`, else the `x-ratelimit-reset-*`
  of the exhausted limit), those holding a slot but not yet sent too (Limiter.hold, in
  the OpenAI client's request hook); the refused request itself gives its slot back and queues
  for one again (`observe` returns that wait for the HTTP hook to await before the SDK
  retries), so the SDK's retries cannot stampede the server all at once;
- with no rate headers (a gateway that only says `Retry-After`), a 429 says either "too
  fast" (a rate) or "too many at once" (a cap on requests in flight), and an episode (a
  429 while no pause holds requests back, and the 429s that follow it during its pause)
  tells which. Refused with more requests in flight than the server was seen to take
  (or before any 429), or within a round trip of the last pause's end, it is a cap: the
  requests out when the episode began, less those it refused, are the ceiling of
  requests in flight, never below half the most answered in one round trip (a cap
  answers no more than its ceiling a round trip, while a rate's window that slow start's
  burst spent refuses nearly all it is sent: 50 of 56, no cap of 6) (found at the first
  episode against a cap, and probed upwards by
  one after a quiet spell that doubles with each refused probe; after the pause, the
  requests resume at half of it and grow back by half again a round trip). Refused within that
  ceiling, it is a rate: the budget is spent at each
  episode, so the successes between two (at least LEARN_SPAN apart when there are, and
  never across a refusal at a pause's end, which shows a window still spent, unless that
  long) are the rate the server grants; before a rate is known, a refusal at a pause's
  end resumes the requests at half those out, as a cap's episode does; the
  request limiter is capped at that rate times a call's latency, as with headers below,
  and the rate is probed upwards by 1% a second (nothing else says when it grows).
  Halving alone would overshoot and pause again every few round trips, and a rate
  learned from a cap's episodes counts the pauses and lands far below the cap;
- when the `x-ratelimit-limit/remaining/reset-requests` headers are there, they give the
  rate the server refills (limit - remaining requests come back within the reset time);
  by Little's law the requests worth keeping in flight are that rate times a call's
  latency, so the request limiter is capped there (a provider's burst allowance would
  otherwise let slow start overshoot far beyond the sustained rate);
- OpenAI's `x-ratelimit-limit/remaining/reset-tokens` give the tokens it refills: over
  the tokens a call is charged (its prompt's and its output cap's, `tokens_charged`),
  the calls a second they allow; the tighter of the two rates paces. Such a stated rate
  is kept at 0.9 after each refusal that shows it spent, probed back at 1% a second. A
  429 whose headers show a budget spent is a rate, whatever was in flight. Without
  headers, the rate learned between 429s (over at least LEARN_SPAN of episodes) is kept
  in tokens too;
- a success whose `x-ratelimit-remaining-*` headers show the budget nearly spent (less
  than the requests in flight, or under a tenth of the limit; tokens too) stops the
  growth and trims the limit by a tenth, once per window: the client slows before it is
  refused rather than after, which keeps 429s rare and the throughput near the allowed rate.

Signals come from every HTTP response (`observe`, fed by the OpenAI client's response
hook, retried 429s included) and from every finished call (`call_succeeded`, with its
duration, for calls answered at their first attempt: a retried call's time is mostly the
wait imposed on it). A backend that shows no responses (the mock, a custom client) grows
on success and backs off on latency only; calls under 10 ms (the mock's) show no queue.
Everything runs on the runner's one event loop, so no lock."""

from __future__ import annotations

import asyncio
import logging
import math
import re
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_geo.llm.limiter import Limiter
from pytest_geo.llm.loop_lag import LoopLag
from pytest_geo.settings import DEFAULT_CONCURRENCY

START = DEFAULT_CONCURRENCY  # rows: the old fixed default, so auto never opens harder than it did
MEAN_REQUESTS_PER_ROW = 1.5  # a GEO row's three calls take two round trips (two at once, then one)
# Rows per successful call while no pressure was seen: 2/3 of a row per answer doubles
# the requests in flight a round trip; past START rows, half that: half again a round trip.
SLOW_START_STEP = 1 / MEAN_REQUESTS_PER_ROW
PROBING_STEP = SLOW_START_STEP / 2
PIPE_GROWTH = 1.25  # slow start goes on while a round trip's calls finished grow by a quarter
FULL_PIPE_ROUNDS = 3  # round trips without that growth, the rows' limit binding: no more to gain
PIPE_CALLS = 16  # calls a round trip must hold before a round without growth counts
STARTUP_GAIN = 2.0  # slow start's rows stay within this many times what the best round needs
CLIENT_BUSY = 0.5  # share of a round trip the event loop ran late: the client is saturated, no growth
SLOWER = 2.0  # calls this many times slower than the fastest seen: more rows would only queue
QUEUEING = 4.0  # this many times slower: a saturated server or CPU, cut to what it serves
QUEUE_SIGNAL = 0.01  # seconds: faster calls (the mock's) vary with the event loop's jitter, not a queue
CUT_ON_429 = 0.5
RESUME_STEP = 0.5  # requests in flight each answer adds after a cap's episode: half again a round trip
TRIM_ON_PRESSURE = 0.9
LOW_BUDGET = 0.1  # share of a limit left that counts as pressure
PROBE = 0.01  # requests/s added to a rate learned from 429s per success: 1% a second
HELD_MARGIN = 2  # a cap's ceiling times this is more than it answers in a round trip (answers come in clumps)
CEILING_PROBE = 15.0  # seconds without a 429 before a learned ceiling of requests in flight rises by one
THROUGHPUT_CALLS = 128  # finished calls whose pace measures a bottleneck's throughput
SMOOTHING = 0.2  # weight of the newest sample in the latency and refill-rate averages
# Weight of the newest call in the average of tokens a call is charged: prompts of 2,000 to
# 6,000 tokens vary by a third of their mean, which 1/32 averages to about 4%.
TOKEN_SMOOTHING = 1 / 32
LEARN_SPAN = 2.0  # seconds: a rate is learned over the episodes of at least this long, when there are
MIN_PACE = 0.5  # the least share of a stated rate that refusals trim the pace to
DEFAULT_PAUSE = 0.5  # seconds, for a 429 that says nothing of when to come back
MAX_PAUSE = 60.0
BATCH_ROWS = 1_000_000  # no bound: under --geo-batch a row waits for its round, not a slot
REQUESTS_PER_ROW = 2  # rank_before and the rewrite overlap; rank_after follows them
# DEBUG lines: each 429 (an episode's first with its verdict), each rate learned, the
# limits as they move; `bench/bench_adaptive.py --trace` prints them beside the server's side.
trace = logging.getLogger(__name__)
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float | None:
    """OpenAI's reset format ("20ms", "1s", "6m0s", "1h2m3.5s"), or plain seconds; None
    for anything else, and for what no wait can be (NaN, infinite, negative, over a day)."""
    text = text.strip()
    try:
        return _seconds(float(text))
    except ValueError:
        pass
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return _seconds(sum(float(n) * _UNIT[u] for n, u in parts))


MAX_HEADER_SECONDS = 86400.0  # a header's wait or reset beyond a day is not one to act on
MIN_RESET = 0.001  # a reset below a millisecond (1e-320) would make an infinite refill rate


def _seconds(value: float) -> float | None:
    """A header's number of seconds, or None when it cannot be one."""
    return value if math.isfinite(value) and 0 <= value <= MAX_HEADER_SECONDS else None


def retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds to wait, as the SDK reads them (milliseconds first), else the reset time
    of a limit whose remaining budget is zero. A value that is no wait is ignored."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is not None:
            try:
                seconds = _seconds(max(0.0, float(value)) * scale)
            except ValueError:
                continue
            if seconds is not None:
                return seconds
    resets = [
        parse_duration(headers.get(f"x-ratelimit-reset-{kind}", ""))
        for kind in ("requests", "tokens")
        if headers.get(f"x-ratelimit-remaining-{kind}", "").strip() == "0"
    ]
    known = [r for r in resets if r is not None]
    return max(known) if known else None


def refill_rate(headers: Mapping[str, str], kind: str = "requests") -> float | None:
    """Requests (`kind` "tokens": tokens) per second the server gives back: (limit -
    remaining) within the reset time ("the time until the rate limit resets to its
    initial state"); None unless all three headers are usable numbers."""
    try:
        limit = int(headers[f"x-ratelimit-limit-{kind}"])
        remaining = int(headers[f"x-ratelimit-remaining-{kind}"])
    except (KeyError, ValueError):
        return None
    reset = parse_duration(headers.get(f"x-ratelimit-reset-{kind}", ""))
    if reset is None or reset < MIN_RESET or remaining >= limit or remaining < 0:
        return None
    return (limit - remaining) / reset


def budget_low(headers: Mapping[str, str], requests_in_flight: int) -> bool:
    """The `x-ratelimit-remaining-*` headers say the next round trip would hit the limit."""
    for kind in ("requests", "tokens"):
        try:
            remaining = int(headers[f"x-ratelimit-remaining-{kind}"])
            limit = int(headers[f"x-ratelimit-limit-{kind}"])
        except (KeyError, ValueError):
            continue
        if limit <= 0 or remaining < 0:
            continue
        if remaining < LOW_BUDGET * limit or (kind == "requests" and remaining < requests_in_flight):
            return True
    return False


def budget_spent(headers: Mapping[str, str], call_tokens: float | None) -> bool:
    """A 429's `x-ratelimit-*` headers say a rate's budget ran out (no request left, or
    fewer tokens than a call is charged, or than LOW_BUDGET of the limit while that is not
    known): it refused the pace, not the requests in flight."""
    for kind, need in (("requests", 1.0), ("tokens", call_tokens)):
        try:
            remaining = int(headers[f"x-ratelimit-remaining-{kind}"])
            limit = int(headers[f"x-ratelimit-limit-{kind}"])
        except (KeyError, ValueError):
            continue
        if limit > 0 and 0 <= remaining < (need if need is not None else LOW_BUDGET * limit):
            return True
    return False


@dataclass
class ConcurrencyStats:
    """What the summary and the JSON report show; plain data, crosses xdist processes."""

    mode: str  # "auto", "fixed" or "batch"
    limit: int  # the fixed limit, or auto's final one
    reached: int  # the most rows allowed in flight at any time
    rate_limited: int  # 429 answers seen (retried ones included)
    maximum: int | None = None  # auto's upper bound
    start: int | None = None  # auto's first limit: the line says "rose" only past it

    def as_json(self) -> dict[str, Any]:
        return {"mode": self.mode, "limit": self.limit, "reached": self.reached,
                "rate_limited": self.rate_limited, "maximum": self.maximum, "start": self.start}


class RowShare:
    """One row limiter for several endpoints' controllers (`share_rows`): sized to the
    sum of the rows each asks for."""

    def __init__(self, rows: Limiter) -> None:
        self.rows = rows
        self.asked: dict[int, int] = {}

    def ask(self, who: object, rows: int) -> None:
        self.asked[id(who)] = rows
        self.rows.resize(sum(self.asked.values()))


class AdaptiveConcurrency:
    """Turns the runner's row limiter and the client's request limiter together."""

    def __init__(self, rows: Limiter, requests: Limiter, maximum: int, start: int = START,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.rows = rows
        self.row_share: RowShare | None = None  # set by share_rows: the rows are several endpoints'
        self.clock = clock  # seconds; the rate and queue rules measure time with it
        self.requests = requests
        self.maximum = max(1, maximum)
        self.limit = float(min(start, self.maximum))
        self.start = self.reached = int(self.limit)
        self.rate_limited = 0
        self.slow_start = True
        self._answers = 0  # responses seen, the clock of the one-cut-per-window rule
        self._window_end = 0
        self._latency: float | None = None  # seconds per successful call, smoothed
        self._fastest: float | None = None  # the lowest smoothed latency seen
        self._rate: float | None = None  # requests per second the server refills, smoothed
        self._granted: float | None = None  # requests per second learned between 429s
        self._token_rate: float | None = None  # tokens per second the server refills (its headers), smoothed
        self._granted_tokens: float | None = None  # tokens per second learned between 429s
        self._call_tokens: float | None = None  # tokens a call is charged (tokens_charged), smoothed
        self._token_calls = 0  # calls whose tokens were heard
        self._tokens = 0  # and their tokens
        self._tokens_before = (0, 0)  # both, at the last 429 episode
        # (when, successes before, tokens before) of the episodes before the last, for LEARN_SPAN
        self._marks: deque[tuple[float, int, tuple[int, int]]] = deque(maxlen=32)
        self._spent_again = -math.inf  # when a rate's budget was last still spent as its pause ended (the clock)
        # Share of the headers' rate paced at: held exactly at a bucket's refill rate, the
        # bucket stays empty and each early request is refused (and its retries too), so
        # a refusal trims it and successes probe it back (by PROBE a second).
        self._pace = 1.0
        self._successes = 0  # 2xx responses seen
        self._last_refusal: float | None = None  # when the last 429 cut was made (the clock)
        self._successes_before = 0  # successes seen until a latency after it
        self._ceiling: int | None = None  # requests in flight the server refuses above (its 429s)
        self._tested: int | None = None  # in flight the server was seen to take: the ceiling less a fresh probe
        self._resume: float | None = None  # requests in flight after a cap's episode, growing back to the ceiling
        self._rate_episode = False  # the current 429 episode's refusals came within the ceiling
        self._episode_end = 0.0  # when the current 429 episode's pause ends (the clock)
        self._pause_end = 0.0  # when the latest pause ends (the clock): calls begun before waited in it
        self._episode_sent = 0  # requests out at its first refusal, that one included
        self._episode_refused = 0  # its refusals so far
        self._quiet_since = 0.0  # when the last 429 came (the clock): the ceiling's probe waits from it
        self._probe_wait = CEILING_PROBE  # doubles with each episode that refuses more in flight
        self._answered: deque[float] = deque()  # when the successes of the last round trip came back
        self._held = 0  # the most successes seen in one round trip: the server held as many at once
        self._sees_responses = False  # observe() is fed: HTTP answers are the windows' clock
        self._finished: deque[float] = deque(maxlen=THROUGHPUT_CALLS)  # when the last calls came back
        self._queued: float | None = None  # smoothed server time of calls sent under the current limit
        self._served: float | None = None  # seconds per successful call less the client's own delay, smoothed
        self._lag = LoopLag(clock, lambda: bool(self.requests.in_use or self.rows.in_use))
        self._round_start: float | None = None  # slow start's current round trip began (the clock)
        self._round_calls = 0  # calls finished in it
        self._pipe_rate = 0.0  # calls finished per second in the round that last grew by PIPE_GROWTH
        self._flat_rounds = 0  # round trips since, with the rows' limit binding
        self._cut_at = 0.0  # when the limit was last cut (the clock)
        self._settled_at = 0.0  # when that cut's window closed: calls sent since ran under it
        self._episodes = 0  # 429 episodes so far (the trace numbers them)
        self._applied = (0, 0)  # the rows' and requests' limits last set (the trace tells changes; _apply keeps them)
        self._apply()

    @property
    def ceiling(self) -> int | None:
        """Requests in flight the server's 429s refuse above (None: none seen)."""
        return self._ceiling

    @property
    def request_cap(self) -> int | None:
        """Requests worth keeping in flight: at the rate the server grants (Little's law:
        the refill rate its headers give, else the rate learned between its 429s) and
        within the ceiling its 429s showed."""
        rate, heard = self.allowed_rate, self._heard_rate() is not None
        cap = None
        if rate is not None and self._latency is not None:
            # A rate the headers state is never exceeded (rounded down: above it, the budget
            # drains by the excess until refused); one learned from 429s is probed (up).
            held = rate * self._latency
            cap = max(1, math.floor(held + 1e-9) if heard else math.ceil(held - 1e-9))
        if self._ceiling is None:
            return cap  # 10.000000001 requests is 10
        ceiling = self._ceiling if self._resume is None else max(1, min(self._ceiling, int(self._resume)))
        return ceiling if cap is None else min(cap, ceiling)

    @property
    def allowed_rate(self) -> float | None:
        """Requests per second the server grants: the tighter of the limits its headers
        give (its requests', and its tokens' over the tokens a call is charged), else of
        those its 429s taught. Without headers nothing says whether requests or tokens
        ran out, so an episode's budget counts both, and calls that grow since are paced
        by their tokens, calls that shrink by their number."""
        heard = self._heard_rate()
        if heard is not None:
            return heard * self._pace
        learned = [r for r in (self._granted, self._per_call(self._granted_tokens)) if r is not None]
        return min(learned) if learned else None

    def _heard_rate(self) -> float | None:
        """Requests per second the headers' limits allow (the tighter), None without them,
        or while they state a token limit and no call's tokens are known yet (the first
        answer's headers come before its tokens): the request limit alone might let
        through more long prompts than the tokens allow."""
        if self._token_rate is not None and self._call_tokens is None:
            return None
        heard = [r for r in (self._rate, self._per_call(self._token_rate)) if r is not None]
        return min(heard) if heard else None

    def _per_call(self, tokens_per_second: float | None) -> float | None:
        """Calls per second a token rate allows at the tokens a call is charged."""
        if tokens_per_second is None or not self._call_tokens:
            return None
        return tokens_per_second / self._call_tokens

    def tokens_charged(self, tokens: int) -> None:
        """A call was answered, charged `tokens` by a token limit (its prompt's and its
        output cap's, as OpenAI meters one): the pace a token rate allows is that rate
        over a call's tokens."""
        if tokens <= 0:
            return
        self._call_tokens = tokens if self._call_tokens is None else (
            (1 - TOKEN_SMOOTHING) * self._call_tokens + TOKEN_SMOOTHING * tokens)
        self._token_calls += 1
        self._tokens += tokens

    def observe(self, status: int, headers: Mapping[str, str]) -> Awaitable[None] | None:
        """One HTTP response (header names lower-case); for a 429, the wait for a slot
        that the refused request should await before it is retried."""
        self._answers += 1
        self._sees_responses = True
        if status == 429:
            self.rate_limited += 1
            pause = retry_after(headers)
            pause = DEFAULT_PAUSE if pause is None else min(pause, MAX_PAUSE)
            self._refused(self.requests.in_use, pause, budget_spent(headers, self._call_tokens))
            self.requests.pause_until(asyncio.get_running_loop().time() + pause)
            self._cut(CUT_ON_429)
            return self.requests.requeue()
        if 200 <= status < 300:
            self._successes += 1
            self._count_held()
            if self._resume is not None and self.clock() >= self._episode_end:
                self._resume += RESUME_STEP
                if self._ceiling is None or self._resume >= self._ceiling:
                    self._resume = None
            if (self._last_refusal is not None and self._latency is not None
                    and self.clock() < self._last_refusal + self._latency):
                self._successes_before += 1  # admitted before that 429: not in the next count
            rate = refill_rate(headers)
            if rate is not None:
                self._rate = _smooth(self._rate, rate)
            rate = refill_rate(headers, "tokens")
            if rate is not None:
                self._token_rate = _smooth(self._token_rate, rate)
            if budget_low(headers, self.requests.in_use):
                self._cut(TRIM_ON_PRESSURE)
        return None

    def _refused(self, in_flight: int, pause: float, spent: bool = False) -> None:
        """A 429 with `in_flight` requests out, the refused one included, asking for
        `pause` seconds. The first of an episode (no pause holding requests back) says
        what kind of limit refused it. A cap: refused within a round trip of the last
        pause's end (the server said its budget would be back by then: it refuses the
        requests sent at once, not their pace), or with more in flight than it took; a
        rate: refused with nothing else in flight, or within what it took. A cap's
        episode lowers the ceiling to the requests it took. `spent`: the 429's rate headers
        say a budget ran out: a rate, whatever was in flight."""
        now = self._quiet_since = self.clock()
        self._pause_end = max(self._pause_end, now + pause)
        if now >= self._episode_end:
            resuming = self._latency is not None and now < self._episode_end + self._latency
            self._episode_end = now + pause
            self._episode_sent, self._episode_refused = in_flight, 0
            # Refused again as a rate's pause ends: the same budget, still spent (a sliding
            # window's Retry-After undersells when its old admissions age out), not a cap.
            # Nor is a 429 a cap's with no more than half the ceiling out: a cap that took
            # the ceiling does not refuse half of it (half the ceiling, not the resume level,
            # which is back at the ceiling within two round trips).
            below = self._ceiling is not None and in_flight <= self._ceiling * CUT_ON_429
            self._rate_episode = spent or in_flight <= 1 or (
                (not resuming or self._rate_episode or below) and self._tested is not None
                and in_flight <= self._tested)
            if not self._rate_episode and self._tested is not None:
                self._probe_wait *= 2  # refused above what it took: probe the ceiling less often
            if resuming and self._rate_episode:
                self._still_spent(now, in_flight)
            else:
                self._learn_granted_rate(learn=self._rate_episode)
        self._episode_refused += 1
        first = self._episode_refused == 1
        if first:
            self._episodes += 1
            if self._rate_episode and self._heard_rate() is not None:
                self._pace = max(MIN_PACE, self._pace * TRIM_ON_PRESSURE)
        if not self._rate_episode:
            self._cap_refusal()
        if trace.isEnabledFor(logging.DEBUG):
            trace.debug("429 at %.3f: episode %d, refusal %d, %d requests in flight%s", now, self._episodes,
                        self._episode_refused, in_flight, self._verdict() if first else "")

    def _cap_refusal(self) -> None:
        """A refusal in a cap's episode: the requests out when the episode began, less
        those it refused, were taken (counted so, not by the requests still out: a busy
        client reads some answers meanwhile), and the ceiling falls to that, but not below
        1/HELD_MARGIN of the most answered in one round trip: a cap admits its ceiling all
        the time, so it answers no more than that a round trip, while a rate's window,
        spent by slow start's burst, refuses all it is sent until its old admissions age
        out (56 out, 50 refused, 36 answered in a round trip: no cap of 6)."""
        taken = max(1, self._episode_sent - self._episode_refused, self._held // HELD_MARGIN)
        self._ceiling = taken if self._ceiling is None else min(self._ceiling, taken)
        self._tested = self._ceiling
        # Resume at half the ceiling: were it a rate after all, the refill would run dry
        # again, and a busy client reads that 429 late, after sending as many more to be
        # refused as it has requests out. Growing back by half again a round trip, not
        # one request: a first episode before any answer (slow start's burst of long
        # prompts) cannot tell a token rate from a cap, and at one a 1 s round trip the
        # way back from 15 to 27 requests cost a tenth of a 25 s run (bench_adaptive.py).
        self._resume = self._ceiling * CUT_ON_429

    def _count_held(self) -> None:
        """A success: the most answered in one round trip (the fastest latency) grows."""
        fastest = self._round_trip()
        if fastest is None:
            return
        now = self.clock()
        self._answered.append(now)
        while self._answered[0] <= now - fastest:
            self._answered.popleft()
        self._held = max(self._held, len(self._answered))

    def _verdict(self) -> str:
        """An episode's classification and what it left the controller with, for the trace."""
        granted = "none" if self._granted is None else f"{self._granted:.1f}/s"
        latency = "none" if self._latency is None else f"{self._latency * 1000:.0f} ms"
        resume = "none" if self._resume is None else f"{self._resume:.1f}"
        return (f"; a {'rate' if self._rate_episode else 'cap'}, pause {self._episode_end - self.clock():.2f}s, "
                f"ceiling {self._ceiling}, resume {resume}, granted {granted}, latency {latency}, held {self._held}")

    def _still_spent(self, now: float, in_flight: int) -> None:
        """A rate's 429 as its last pause ended: its budget is still spent, no refill was
        measured since (a sliding window's Retry-After undersells when its old admissions
        age out), and no rate is learned over a span that holds this moment unless it is
        LEARN_SPAN long. With no rate known yet, only the ceiling bounds the requests, and
        all sent at the pause's end were refused: they resume at half of those, as after
        a cap's episode."""
        self._spent_again = now
        if self.allowed_rate is None and self._ceiling is not None:
            self._resume = in_flight * CUT_ON_429

    def _learn_granted_rate(self, learn: bool = True) -> None:
        """The first 429 of an episode. If a rate refused it (`learn`), the server's budget
        is spent now, as it was at the last episode, so what it admitted in between is
        what it grants in that time (less, if its budget filled up unused meanwhile: a
        floor of its rate). Admitted requests are answered a latency later, so the count
        is taken then: the successes from a latency after the last episode to a latency
        after this one."""
        now = self.clock()
        if self._last_refusal is not None:
            self._marks.append((self._last_refusal, self._successes_before, self._tokens_before))
        if learn and self._marks and self._latency is not None:
            # Over at least LEARN_SPAN when there are such episodes, else over the longest
            # span since the budget was last found still spent at a pause's end: a window
            # whose Retry-After undersells counts few successes over a few pauses (slow
            # start's burst, then 12 successes in 0.56 s: 21/s of 100).
            mark = next((m for m in reversed(self._marks) if m[0] <= now - LEARN_SPAN),
                        next((m for m in self._marks if m[0] >= self._spent_again), None))
            if mark is not None:
                since, before, tokens = mark
                asyncio.get_running_loop().call_later(self._latency, self._learn_rate, before, now - since, tokens)
        self._last_refusal = now
        self._successes_before = self._successes
        self._tokens_before = (self._token_calls, self._tokens)

    def _learn_rate(self, successes_before: int, seconds: float, tokens_before: tuple[int, int]) -> None:
        """The granted rate, in requests and (for calls whose tokens were heard) in tokens
        per second: the requests granted times the mean call of the same span."""
        self._granted = (self._successes - successes_before) / seconds
        calls, tokens = self._token_calls - tokens_before[0], self._tokens - tokens_before[1]
        if calls:
            self._granted_tokens = self._granted * tokens / calls
        trace.debug("granted rate at %.3f: %.1f requests/s (%d successes in %.3fs), %s tokens/s", self.clock(),
                    self._granted, self._successes - successes_before, seconds,
                    "none" if self._granted_tokens is None else f"{self._granted_tokens:.0f}")
        self._apply()

    def call_succeeded(self, seconds: float) -> None:
        """A model call came back after `seconds`: room to grow, unless the last window
        saw pressure or the rows already fill the request cap."""
        now = self.clock()
        if not self._sees_responses:
            self._answers += 1  # a backend without an HTTP hook: its calls are the clock
        self._finished.append(now)
        self._lag.watch()
        if self._settled_at < self._cut_at and self._window_over():
            self._settled_at = now
        # A call begun before a pause's end may have waited in it (Limiter.hold): its time
        # is the server's Retry-After, not its pace.
        if now - seconds >= self._pause_end and self._slower(now, seconds):
            return
        # With no round trip (no latency yet, or answers in microseconds: the mock's) there
        # is no pipe to fill and no share of a round trip the client ran late: neither rule asked.
        fastest = self._round_trip()
        if fastest is not None:
            self._full_pipe(now, fastest)
        cap = self.request_cap
        self._probe(now)
        # At the bound (the mock's rows soon are) nothing below could raise the limit.
        if (self.limit >= self.maximum or not self._window_over() or (cap is not None and self.limit >= cap)
                or (fastest is not None and self._client_busy(now, fastest))):
            self._apply()  # the cap moves with the latency and the rate
            return
        if not self.slow_start:
            step = 1.0 / self.limit
        else:  # doubling up to where a hosted run opens, half again a round trip past it
            step = SLOW_START_STEP if self.limit < START else PROBING_STEP
        bound = min(self.maximum, STARTUP_GAIN * self._pipe_rows()) if self._pipe_known() else self.maximum
        if self.limit < bound:
            self.limit = min(float(bound), self.limit + step)
        self._apply()

    def _probe(self, now: float) -> None:
        """After a success: the limits learned from refusals are probed upwards, slowly."""
        if self._granted is not None and self._rate is None and self._token_rate is None and self._window_over():
            self._probe_granted()  # no headers to say when the rate grows: probe for it, slowly
        heard = self._heard_rate()
        if heard is not None and self._pace < 1.0:
            self._pace = min(1.0, self._pace + PROBE / max(1.0, heard))  # back to the stated rate, 1% a second
        if self._ceiling is not None and now - self._quiet_since >= self._probe_wait:
            self._tested = self._ceiling  # it held a quiet spell
            self._ceiling += 1  # nor does anything say when a cap on requests in flight grows: one more
            self._quiet_since = now

    def _probe_granted(self) -> None:
        """The learned rates rise by PROBE requests per second (a token rate by as much
        in proportion)."""
        assert self._granted is not None
        if self._granted_tokens is not None and self._granted > 0:
            self._granted_tokens *= 1 + PROBE / self._granted
        self._granted += PROBE

    def _slower(self, now: float, seconds: float) -> bool:
        """A call's time joins the latency averages; True if it showed a queue and cut.
        The queue rules read the server's share of the time: less the time the event
        loop ran late meanwhile (a busy or stalled client, which fewer rows would not
        speed up)."""
        self._latency = _smooth(self._latency, seconds)
        self._fastest = self._latency if self._fastest is None else min(self._fastest, self._latency)
        fastest = self._round_trip()
        if fastest is None:
            return False
        served = max(0.0, seconds - self._lag.since(now - seconds))
        self._served = _smooth(self._served, served)
        if self._served > QUEUEING * fastest and self._drain_queue():
            return True
        if now - seconds >= self._settled_at:  # sent under the current limit
            self._queued = _smooth(self._queued, served)
            if self._queued > SLOWER * fastest:
                self._cut(TRIM_ON_PRESSURE)
                return True
        return False

    def _round_trip(self) -> float | None:
        """The fastest latency seen, the controller's round trip; None while there is none,
        or while calls are answered faster than QUEUE_SIGNAL (the mock's, in microseconds):
        such times vary with the event loop's jitter, and show neither a queue nor a pipe."""
        fastest = self._fastest
        return None if fastest is None or fastest < QUEUE_SIGNAL else fastest

    def _client_busy(self, now: float, fastest: float) -> bool:
        """This client is its own bottleneck: over the last round trip its event loop ran
        late for more than CLIENT_BUSY of it. More rows would only wait in its own queue
        (and under a rate limit, a busy client reads a 429 late, after sending dozens
        more to be refused), so the limit does not grow meanwhile. Half, not less: a
        round trip's answers come back in a clump and are handled back to back, so a
        client busy a third of the time runs that late once a round trip and is no
        bottleneck (at a quarter, `egeo`'s 400 rows stalled for 0.3 s at a time from
        20 rows on). `fastest`: the round trip (`_round_trip`)."""
        return self._lag.since(now - fastest) > CLIENT_BUSY * fastest

    def _full_pipe(self, now: float, fastest: float) -> None:
        """Slow start's check that more rows still buy throughput (as TCP BBR's start-up
        finds a full pipe): each round trip (the fastest latency), the calls finished per
        second should grow by a quarter over the best round so far. FULL_PIPE_ROUNDS
        rounds without, while rows wait for a slot, mean whatever is saturated (this
        client's CPU, the server) gains nothing from more: slow start ends there, and the
        rows fall back to twice what it serves without queueing (`_pipe_rows`); until
        then they stay within STARTUP_GAIN times that. Latency alone would take several
        doublings to show it, if ever: a busy client's delay is its own (`_slower`).
        `fastest`: the round trip (`_round_trip`)."""
        if not self.slow_start:
            return
        self._round_calls += 1
        if self._round_start is None:
            self._round_start = now - fastest
        if now - self._round_start < fastest:
            return
        span = now - self._round_start
        rate = self._round_calls / span
        held_up = self._lag.since(self._round_start) > CLIENT_BUSY * span
        self._round_start, self._round_calls = now, 0
        if held_up:
            return  # a round the client itself held up says nothing of the pipe
        if rate >= PIPE_GROWTH * self._pipe_rate:
            self._pipe_rate, self._flat_rounds = rate, 0
        elif self.rows.waiting and self._pipe_known():  # else too few calls to tell, or the rows ran out
            self._flat_rounds += 1
            if self._flat_rounds >= FULL_PIPE_ROUNDS:
                self._cut_to(min(self.limit, self._pipe_rows()))

    def _pipe_known(self) -> bool:
        """In slow start, with enough calls in a round trip to read its throughput."""
        return self.slow_start and self._fastest is not None and self._pipe_rate * self._fastest >= PIPE_CALLS

    def _pipe_rows(self) -> float:
        """Rows that keep SLOWER times the best round's requests in flight at the
        fastest latency (Little's law): twice what the bottleneck serves without queueing."""
        assert self._fastest is not None
        return SLOWER * self._pipe_rate * self._fastest / MEAN_REQUESTS_PER_ROW

    def _drain_queue(self) -> bool:
        """Calls wait in a queue QUEUEING times their fastest latency: whatever serves
        them (a server answering one call at a time, or this machine's CPU) is saturated,
        and its throughput (calls finished per second) times the fastest latency is what
        it serves without queueing (Little's law). Keep SLOWER times that in flight, at
        once rather than a tenth per window: at 10 s a call, a window of 30 queued calls
        lasts minutes. The target does not depend on the limit, so applying it again
        while the queue drains cuts no further. True if it cut."""
        assert self._fastest is not None
        if len(self._finished) < 3 or self._finished[-1] <= self._finished[0]:
            return False
        throughput = (len(self._finished) - 1) / (self._finished[-1] - self._finished[0])
        rows = max(1.0, SLOWER * throughput * self._fastest / REQUESTS_PER_ROW)
        if rows >= self.limit:
            return False
        self._cut_to(rows)
        return True

    def _window_over(self) -> bool:
        return self._answers >= self._window_end

    def _cut(self, factor: float) -> None:
        self.slow_start = False
        if self._window_over():  # else this window was cut already
            self._cut_to(self.limit * factor)

    def _cut_to(self, limit: float) -> None:
        """A new limit; the requests in flight were sent under the old one, so the window
        (no further cut by a factor) lasts until as many answers came back."""
        self.slow_start = False
        self.limit = max(1.0, limit)
        self._window_end = max(self._window_end, self._answers + self.requests.in_use)
        self._cut_at = self.clock()
        self._queued = None
        self._apply()

    def _apply(self) -> None:
        cap = self.request_cap
        if cap is not None and self.limit < cap:  # a row makes at least one request: fewer would idle slots
            self.limit = float(min(cap, self.maximum))
        rows = int(self.limit)
        requests = REQUESTS_PER_ROW * rows if cap is None else min(REQUESTS_PER_ROW * rows, cap)
        if (rows, requests) == self._applied and not self.requests.paused_until():
            # Set already, as after most calls: resizing to the same limits would wake nobody
            # (waiters that fit got in when they came or when a holder left), unless a
            # pause ended and its timer has not run yet.
            return
        self.reached = max(self.reached, rows)
        if self.row_share is None:
            self.rows.resize(rows)
        else:
            self.row_share.ask(self, rows)
        self.requests.resize(requests)
        applied = (rows, self.requests.limit)
        if applied != self._applied:
            self._applied = applied
            trace.debug("limits at %.3f: %d rows, %d requests in flight", self.clock(), *applied)

    def stats(self) -> ConcurrencyStats:
        return ConcurrencyStats("auto", int(self.limit), self.reached, self.rate_limited, self.maximum, self.start)


def _smooth(average: float | None, sample: float) -> float:
    return sample if average is None else (1 - SMOOTHING) * average + SMOOTHING * sample


class FixedConcurrency:
    """A fixed --geo-concurrency N: the limiters stay put; 429s are only counted."""

    def __init__(self, rows: Limiter, requests: Limiter, limit: int, mode: str = "fixed") -> None:
        self.limit = limit
        self.mode = mode
        rows.resize(limit)
        requests.resize(REQUESTS_PER_ROW * limit)
        self.rows = rows
        self.requests = requests
        self.rate_limited = 0

    def observe(self, status: int, headers: Mapping[str, str]) -> Awaitable[None] | None:
        if status == 429:
            self.rate_limited += 1
        return None

    def call_succeeded(self, seconds: float) -> None:
        pass

    def tokens_charged(self, tokens: int) -> None:
        pass

    def stats(self) -> ConcurrencyStats:
        return ConcurrencyStats(self.mode, self.limit, self.limit, self.rate_limited)


Controller = AdaptiveConcurrency | FixedConcurrency


def share_rows(controllers: Sequence[Controller]) -> None:
    """Several endpoints' auto controllers (each endpoint its own limits, llm/stack.py)
    bound the rows in flight together: one row limiter, the first's, sized to the sum of
    the rows each asks for. A row waits on every endpoint it calls, so under the first
    endpoint's rows alone an endpoint that needs more in flight (a higher limit, or its
    rows held up at a slower endpoint) idles below its limit; with the sum each has its
    own rows' worth, and the rows beyond an endpoint's requests wait for its slots. A
    fixed --geo-concurrency N stays N rows: nothing is shared then."""
    adaptive = [c for c in controllers if isinstance(c, AdaptiveConcurrency)]
    if len(adaptive) < 2 or len(adaptive) != len(controllers):
        return
    share = RowShare(adaptive[0].rows)
    for controller in adaptive:
        controller.rows, controller.row_share = share.rows, share
        share.ask(controller, int(controller.limit))


def controller_for(fixed: int | None, maximum: int, batch: bool = False, start: int = START) -> Controller:
    """The run's row and request limiters, under the controller --geo-concurrency asks
    for: a number fixes them, None (auto) adapts them from `start` rows; under
    --geo-batch every row runs at once, since a round holds every row that can ask."""
    if batch:
        return FixedConcurrency(Limiter(BATCH_ROWS), Limiter(BATCH_ROWS), BATCH_ROWS, mode="batch")
    if fixed is None:
        start = max(1, min(start, maximum))
        return AdaptiveConcurrency(Limiter(start), Limiter(REQUESTS_PER_ROW * start), maximum, start)
    return FixedConcurrency(Limiter(fixed), Limiter(REQUESTS_PER_ROW * fixed), fixed)
