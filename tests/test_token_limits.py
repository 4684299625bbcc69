"""Token limits under --geo-concurrency auto: OpenAI's `x-ratelimit-*-tokens` headers pace
the requests by the tokens a call is charged, a 429 whose headers show a spent budget is
a rate (not a cap on requests in flight), and without headers the rate learned between
429s is kept in tokens too. A fake clock; no timed assertions."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

import pytest
from fake_openai import RateLimit

from pytest_geo.llm.adaptive import AdaptiveConcurrency, budget_spent, refill_rate
from pytest_geo.llm.base import ChatRequest, ChatResponse
from pytest_geo.llm.bounded import BoundedClient
from pytest_geo.llm.limiter import Limiter

pytestmark = pytest.mark.unit

TOKEN_HEADERS = {"x-ratelimit-limit-tokens": "120000", "x-ratelimit-remaining-tokens": "60000",
                 "x-ratelimit-reset-tokens": "500ms"}  # 60,000 tokens back within 0.5 s: 120,000 a second


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _cancel(*waits: Awaitable[None] | None) -> None:
    for wait in waits:
        assert wait is not None
        asyncio.ensure_future(wait).cancel()


def test_token_headers_give_the_tokens_refilled_a_second() -> None:
    assert refill_rate(TOKEN_HEADERS, "tokens") == 120_000.0
    assert refill_rate({**TOKEN_HEADERS, "x-ratelimit-reset-tokens": "1m0s"}, "tokens") == 1_000.0
    assert refill_rate(TOKEN_HEADERS) is None  # no request headers: no request rate


@pytest.mark.parametrize("name, value", [
    ("x-ratelimit-limit-tokens", "lots"), ("x-ratelimit-remaining-tokens", "nan"),
    ("x-ratelimit-remaining-tokens", "-5"), ("x-ratelimit-remaining-tokens", "120000"),
    ("x-ratelimit-reset-tokens", "1e-320"), ("x-ratelimit-reset-tokens", "inf"),
    ("x-ratelimit-reset-tokens", "soon"), ("x-ratelimit-limit-tokens", "1.5e3"),
])
def test_token_headers_that_are_not_usable_numbers_give_no_rate(name: str, value: str) -> None:
    assert refill_rate({**TOKEN_HEADERS, name: value}, "tokens") is None


def _paced(headers: dict[str, str], call_tokens: int) -> AdaptiveConcurrency:
    async def scenario() -> AdaptiveConcurrency:
        controller = AdaptiveConcurrency(Limiter(1), Limiter(1), 256, clock=FakeClock())
        for _ in range(40):
            controller.observe(200, headers)
            controller.tokens_charged(call_tokens)
            controller.call_succeeded(1.0)
        return controller

    return asyncio.run(scenario())


def test_token_headers_cap_requests_at_the_token_rate_over_a_calls_tokens() -> None:
    """120,000 tokens a second at 5,000 a call is 24 calls a second: at 1 s a call, 24
    requests in flight keep that pace (Little's law); calls of 3,000 tokens, 40."""
    assert _paced(TOKEN_HEADERS, 5_000).allowed_rate == pytest.approx(24.0)
    assert _paced(TOKEN_HEADERS, 5_000).request_cap == 24
    assert _paced(TOKEN_HEADERS, 3_000).request_cap == 40


def test_the_tighter_of_the_request_and_token_limits_paces() -> None:
    requests = {"x-ratelimit-limit-requests": "100", "x-ratelimit-remaining-requests": "90",
                "x-ratelimit-reset-requests": "1s"}  # 10 requests back within 1 s: 10 a second
    assert _paced({**TOKEN_HEADERS, **requests}, 5_000).request_cap == 10
    assert _paced({**TOKEN_HEADERS, **requests}, 20_000).request_cap == 6  # 6 calls a second of 20,000 tokens


def test_unusable_token_headers_leave_the_pace_to_growth() -> None:
    controller = _paced({**TOKEN_HEADERS, "x-ratelimit-reset-tokens": "nan"}, 5_000)
    assert controller.allowed_rate is None and controller.request_cap is None


def test_a_calls_tokens_are_averaged_slowly_so_one_long_prompt_does_not_swing_the_pace() -> None:
    controller = _paced(TOKEN_HEADERS, 4_000)
    controller.tokens_charged(8_000)  # one prompt twice the size
    assert 29.0 < (controller.allowed_rate or 0) <= 30.0  # 30/s at 4,000, not 15
    controller.tokens_charged(0)  # a call whose usage was not reported: no sample
    assert 29.0 < (controller.allowed_rate or 0) <= 30.0


@pytest.mark.parametrize("headers, call_tokens, spent", [
    ({"x-ratelimit-limit-tokens": "120000", "x-ratelimit-remaining-tokens": "3000"}, 5_000.0, True),
    ({"x-ratelimit-limit-tokens": "120000", "x-ratelimit-remaining-tokens": "7000"}, 5_000.0, False),
    ({"x-ratelimit-limit-tokens": "120000", "x-ratelimit-remaining-tokens": "7000"}, None, True),  # under a tenth
    ({"x-ratelimit-limit-tokens": "120000", "x-ratelimit-remaining-tokens": "20000"}, None, False),
    ({"x-ratelimit-limit-requests": "100", "x-ratelimit-remaining-requests": "0"}, None, True),
    ({"x-ratelimit-limit-requests": "100", "x-ratelimit-remaining-requests": "4"}, None, False),
    ({"x-ratelimit-limit-tokens": "many", "x-ratelimit-remaining-tokens": "0"}, None, False),
    ({"x-ratelimit-limit-tokens": "120000", "x-ratelimit-remaining-tokens": "-1"}, None, False),
    ({"retry-after": "1"}, 5_000.0, False),
])
def test_a_429s_headers_say_whether_a_budget_is_spent(headers: dict[str, str], call_tokens: float | None,
                                                       spent: bool) -> None:
    assert budget_spent(headers, call_tokens) is spent


def test_a_429_showing_the_tokens_spent_is_a_rate_not_a_cap_on_requests_in_flight() -> None:
    """Slow start's first burst of long prompts overdraws the token bucket with 32
    requests out: with the headers saying so, no ceiling of 31 requests in flight is
    learned (nor requests resumed at half of it); with `Retry-After` alone it is."""
    spent = {**TOKEN_HEADERS, "x-ratelimit-remaining-tokens": "2000", "retry-after-ms": "20"}

    async def scenario(headers: dict[str, str]) -> AdaptiveConcurrency:
        controller = AdaptiveConcurrency(Limiter(1), Limiter(1), 256, clock=FakeClock())
        controller.requests.in_use = 32
        _cancel(controller.observe(429, headers))
        return controller

    assert asyncio.run(scenario(spent)).ceiling is None
    assert asyncio.run(scenario({"retry-after": "1"})).ceiling == 31


def test_without_headers_the_rate_learned_between_429s_is_kept_in_tokens_too() -> None:
    """Two 429s 2 s apart with 60 calls of 1,000 tokens answered between: 30 calls and
    30,000 tokens a second. Calls that grow to 2,000 tokens are then paced by the tokens
    (15 a second); calls that shrink, by their number (still 30)."""
    clock = FakeClock()

    async def scenario() -> AdaptiveConcurrency:
        controller = AdaptiveConcurrency(Limiter(1), Limiter(1), 256, clock=clock)
        controller.call_succeeded(0.1)
        await controller.requests.acquire()
        first = controller.observe(429, {"retry-after": "1"})
        clock.now += 0.05
        controller.observe(200, {})  # admitted before the first 429: not counted
        clock.now += 0.1
        for _ in range(60):
            clock.now += 0.03
            controller.observe(200, {})
            controller.tokens_charged(1_000)
        clock.now = 102.0
        second = controller.observe(429, {"retry-after": "1"})
        await asyncio.sleep(0.15)  # the rate is learned a latency later
        _cancel(first, second)
        return controller

    controller = asyncio.run(scenario())
    assert controller.allowed_rate == pytest.approx(30.0)
    for _ in range(200):
        controller.tokens_charged(2_000)
    assert controller.allowed_rate == pytest.approx(15.0, rel=0.02)
    for _ in range(300):
        controller.tokens_charged(500)
    assert controller.allowed_rate == pytest.approx(30.0)


def test_answered_calls_report_the_tokens_a_token_limit_charged() -> None:
    """Its prompt's tokens and its output cap (OpenAI meters a request when it comes),
    its answer's without a cap; retried calls too; none when the usage was not reported."""
    class Inner:
        def __init__(self, response: ChatResponse) -> None:
            self.response = response

        async def complete(self, request: ChatRequest) -> ChatResponse:
            return self.response

        async def aclose(self) -> None:
            pass

    def heard(response: ChatResponse, cap: int | None) -> list[int]:
        tokens: list[int] = []
        client = BoundedClient(Inner(response), 2, on_tokens=tokens.append)
        asyncio.run(client.complete(ChatRequest("ranker", "m", [], max_output_tokens=cap)))
        return tokens

    assert heard(ChatResponse("a", prompt_tokens=4_000, completion_tokens=30), 500) == [4_500]
    assert heard(ChatResponse("a", prompt_tokens=4_000, completion_tokens=30), None) == [4_030]
    assert heard(ChatResponse("a", prompt_tokens=4_000, completion_tokens=30, retries=2), None) == [4_030]
    assert heard(ChatResponse("a", usage_reported=False), 500) == []


def test_the_fake_servers_token_limit_charges_prompt_and_cap_and_says_so() -> None:
    limit = RateLimit(rate=float("inf"), max_in_flight=10**9, tokens=10_000)
    admitted, headers = limit.admit(6_000)
    assert admitted and headers["x-ratelimit-remaining-tokens"] in ("4000", "4001")
    assert headers["x-ratelimit-limit-tokens"] == "10000" and "x-ratelimit-limit-requests" not in headers
    refused, headers = limit.admit(6_000)
    assert not refused and limit.refused_tokens == 1
    assert 190 <= int(headers["retry-after-ms"]) <= 200  # 2,000 tokens short at 10,000 a second


def test_a_rate_the_headers_state_is_rounded_down_so_the_budget_never_drains() -> None:
    """120,000 tokens a second at 4,500 a call is 26.7 calls a second: 27 requests in
    flight at 1 s a call would overdraw the bucket by 1.2% a second until refused; 26."""
    assert _paced(TOKEN_HEADERS, 4_500).request_cap == 26


def test_a_stated_token_limit_holds_the_request_rate_back_until_a_calls_tokens_are_known() -> None:
    """The first answer's headers come before its tokens: 30 requests a second alone would
    let 30 long prompts through at once where the tokens allow 12."""
    both = {**TOKEN_HEADERS, "x-ratelimit-limit-requests": "30", "x-ratelimit-remaining-requests": "15",
            "x-ratelimit-reset-requests": "500ms"}

    async def scenario() -> AdaptiveConcurrency:
        controller = AdaptiveConcurrency(Limiter(1), Limiter(1), 256, clock=FakeClock())
        controller.call_succeeded(1.0)
        controller.observe(200, both)
        return controller

    controller = asyncio.run(scenario())
    assert controller.request_cap is None
    controller.tokens_charged(10_000)
    assert controller.request_cap == 12
    assert asyncio.run(scenario()).request_cap is None
    assert _paced({k: v for k, v in both.items() if "tokens" not in k}, 10_000).request_cap == 30


def test_a_refusal_at_a_stated_rate_trims_the_pace_and_successes_bring_it_back() -> None:
    """Paced exactly at a bucket's refill rate the bucket stays empty and an early
    request is refused, its retries too: a 429 that shows the budget spent trims the
    pace by a tenth (24 requests in flight to 21), and successes probe it back by 1% of
    the rate a second (0.01 / 24 a call: about 240 calls)."""
    spent = {**TOKEN_HEADERS, "x-ratelimit-remaining-tokens": "100", "retry-after-ms": "40"}

    async def scenario() -> list[int | None]:
        controller = AdaptiveConcurrency(Limiter(1), Limiter(1), 256, clock=FakeClock())
        caps = []
        for _ in range(40):
            controller.observe(200, TOKEN_HEADERS)
            controller.tokens_charged(5_000)
            controller.call_succeeded(1.0)
        caps.append(controller.request_cap)
        controller.requests.in_use = 5
        _cancel(controller.observe(429, spent))
        caps.append(controller.request_cap)
        for calls in (100, 200):
            for _ in range(calls):
                controller.call_succeeded(1.0)
            caps.append(controller.request_cap)
        return caps

    assert asyncio.run(scenario()) == [24, 21, 22, 24]


def test_several_endpoints_auto_controllers_share_one_row_limiter_of_their_sum() -> None:
    """A row waits on every endpoint it calls: each endpoint's controller gets its own
    rows' worth in the one row limiter the runner uses (the first's)."""
    from pytest_geo.llm.adaptive import FixedConcurrency, share_rows

    async def scenario() -> tuple[int, int, bool]:
        first = AdaptiveConcurrency(Limiter(4), Limiter(8), 256, start=4, clock=FakeClock())
        second = AdaptiveConcurrency(Limiter(6), Limiter(12), 256, start=6, clock=FakeClock())
        share_rows([first, second])
        together = first.rows.limit
        for _ in range(30):
            second.observe(200, {})
            second.call_succeeded(0.1)
        return together, first.rows.limit - int(second.limit), second.rows is first.rows

    assert asyncio.run(scenario()) == (10, 4, True)
    fixed, alone = FixedConcurrency(Limiter(3), Limiter(6), 3), AdaptiveConcurrency(Limiter(5), Limiter(10), 256, start=5)
    share_rows([fixed, alone])  # a fixed N stays N rows: nothing shared
    assert (fixed.rows.limit, alone.rows.limit, alone.row_share) == (3, 5, None)
