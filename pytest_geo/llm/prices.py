"""What model calls cost: a price table per model, in US dollars per million tokens.

The built-in table holds common OpenAI models at their standard-tier list prices
(`PRICES_DATE`; the README names it too), so it prices calls to OpenAI's own API only
(the default server and the `openai/` endpoint): a local server, or another provider
serving a model of the same name (the default `gpt-4o-mini` on a vLLM server), is
unpriced unless `geo_prices` names the model. Prices change: the ini option `geo_prices`
adds or overrides entries, on every server. A model is priced only under its exact name
(a dated snapshot such as `gpt-4o-2024-05-13` can cost more than its alias), so a model
that is not in the table has no cost, never a guessed one.

Prompt tokens a provider served from its prompt cache (a repeated prefix; OpenAI reports
them as `usage.prompt_tokens_details.cached_tokens`) cost the model's cached-input price,
where it has one (models without prompt caching have none: those tokens cost the input
price). A cached-input price is never above the input price. Prompt tokens written to a
cache the request asked for (an Anthropic model's long system prompt, marked with
`cache_control` through OpenRouter: llm/endpoints.py; reported as
`usage.prompt_tokens_details.cache_write_tokens`) cost the model's cache-write price,
never below the input price, so a reservation pricing every prompt token at the higher
of the two (llm/budget.py) stays an upper bound.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from urllib.parse import urlsplit

from pytest_geo.price import NANO_PER_DOLLAR, Price

PRICES_DATE = "2025-08"

# Input, output, cached input (OpenAI's pricing page: a tenth of the input price for gpt-5,
# a quarter for gpt-4.1 and o3, a half for gpt-4o, o3-mini and o4-mini; none for the two
# models without prompt caching).
BUILTIN_PRICES: Mapping[str, Price] = {
    "gpt-5": Price(1.25, 10.00, 0.125),
    "gpt-5-mini": Price(0.25, 2.00, 0.025),
    "gpt-5-nano": Price(0.05, 0.40, 0.005),
    "gpt-4.1": Price(2.00, 8.00, 0.50),
    "gpt-4.1-mini": Price(0.40, 1.60, 0.10),
    "gpt-4.1-nano": Price(0.10, 0.40, 0.025),
    "gpt-4o": Price(2.50, 10.00, 1.25),
    "gpt-4o-mini": Price(0.15, 0.60, 0.075),
    "o3": Price(2.00, 8.00, 0.50),
    "o3-mini": Price(1.10, 4.40, 0.55),
    "o4-mini": Price(1.10, 4.40, 0.275),
    "gpt-4-turbo": Price(10.00, 30.00),
    "gpt-3.5-turbo": Price(0.50, 1.50),
}

# Dollars per million tokens no model costs (a dollar a token): a price of 1e308 made every
# cost infinite, and every row failed converting it to whole nano-dollars.
MAX_PRICE = 100_000.0
PRICE_LINE_FORMAT = ("model = input_per_million, output_per_million[, cached_input_per_million"
                     "[, cache_write_per_million]]")


class PriceError(ValueError):
    """A `geo_prices` line that is not `model = input, output`; the message says which."""


def parse_price_lines(lines: Iterable[str]) -> dict[str, Price]:
    """`PRICE_LINE_FORMAT` per line; blank lines and `#` comments are skipped. Raises
    PriceError naming the line."""
    prices: dict[str, Price] = {}
    for number, raw in enumerate(lines, start=1):
        text = raw.split("#", 1)[0].strip()
        if not text:
            continue
        model, sep, listed = text.partition("=")
        parts = [p.strip() for p in listed.split(",")]
        try:
            if not sep or not model.strip() or len(parts) not in (2, 3, 4):
                raise ValueError
            values = [float(part) for part in parts]
        except ValueError:
            raise PriceError(f"line {number} {raw.strip()!r}: expected {PRICE_LINE_FORMAT!r}") from None
        if not all(math.isfinite(p) and 0 <= p <= MAX_PRICE for p in values):
            raise PriceError(f"line {number} {raw.strip()!r}: prices must be finite, not negative and at most "
                             f"{MAX_PRICE:g} dollars per million tokens")
        price = Price(*values)
        if price.cached_input_per_million is not None and price.cached_input_per_million > price.input_per_million:
            raise PriceError(f"line {number} {raw.strip()!r}: the cached-input price must be at most the input price")
        if price.cache_write_per_million is not None and price.cache_write_per_million < price.input_per_million:
            # the budget reserves every prompt token at the write price: an upper bound only if it is the highest
            raise PriceError(f"line {number} {raw.strip()!r}: the cache-write price must be at least the input price")
        prices[model.strip()] = price
    return prices


OPENAI_API_HOST = "api.openai.com"


def is_openai_api(base_url: str) -> bool:
    """Whether calls to `base_url` go to OpenAI's own API (the `openai/` endpoint's too)."""
    try:
        return urlsplit(base_url).hostname == OPENAI_API_HOST
    except ValueError:
        return False


def price_table(overrides: Mapping[str, Price], base_url: str) -> dict[str, Price]:
    """The prices of calls to the server at `base_url`: `geo_prices` (`overrides`) over
    the built-in table on OpenAI's API, `geo_prices` alone anywhere else."""
    return {**BUILTIN_PRICES, **overrides} if is_openai_api(base_url) else dict(overrides)


def dollars(nanodollars: int) -> float:
    return nanodollars / NANO_PER_DOLLAR


def format_dollars(nanodollars: int) -> str:
    """Cents from $10 up; below, four significant digits in plain notation ($0.0123,
    $0.0000015), so small runs do not read as $0.00."""
    value = dollars(nanodollars)
    if value >= 10 or value == 0:
        return f"${value:,.2f}"
    decimals = max(2, 3 - math.floor(math.log10(value)))
    return f"${value:.{decimals}f}"
