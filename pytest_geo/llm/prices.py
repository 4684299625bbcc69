"""What model calls cost: a price table per model, in US dollars per million tokens.

The built-in table holds common OpenAI models at their standard-tier list prices
(`PRICES_DATE`; the README names it too). Prices change: the ini option `geo_prices`
adds or overrides entries. A model is priced only under its exact name (a dated
snapshot such as `gpt-4o-2024-05-13` can cost more than its alias), so a model that is
not in the table has no cost, never a guessed one. Cached-input discounts are not
modelled: a cost here is what the tokens cost at the list price.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from pytest_geo.price import NANO_PER_DOLLAR, Price

PRICES_DATE = "2025-08"

BUILTIN_PRICES: Mapping[str, Price] = {
    "gpt-5": Price(1.25, 10.00),
    "gpt-5-mini": Price(0.25, 2.00),
    "gpt-5-nano": Price(0.05, 0.40),
    "gpt-4.1": Price(2.00, 8.00),
    "gpt-4.1-mini": Price(0.40, 1.60),
    "gpt-4.1-nano": Price(0.10, 0.40),
    "gpt-4o": Price(2.50, 10.00),
    "gpt-4o-mini": Price(0.15, 0.60),
    "o3": Price(2.00, 8.00),
    "o3-mini": Price(1.10, 4.40),
    "o4-mini": Price(1.10, 4.40),
    "gpt-4-turbo": Price(10.00, 30.00),
    "gpt-3.5-turbo": Price(0.50, 1.50),
}

# Dollars per million tokens no model costs (a dollar a token): a price of 1e308 made every
# cost infinite, and every row failed converting it to whole nano-dollars.
MAX_PRICE = 100_000.0
PRICE_LINE_FORMAT = "model = input_per_million, output_per_million"


class PriceError(ValueError):
    """A `geo_prices` line that is not `model = input, output`; the message says which."""


def parse_price_lines(lines: Iterable[str]) -> dict[str, Price]:
    """`model = input_per_million, output_per_million` per line; blank lines and `#`
    comments are skipped. Raises PriceError naming the line."""
    prices: dict[str, Price] = {}
    for number, raw in enumerate(lines, start=1):
        text = raw.split("#", 1)[0].strip()
        if not text:
            continue
        model, sep, values = text.partition("=")
        parts = [p.strip() for p in values.split(",")]
        try:
            if not sep or not model.strip() or len(parts) != 2:
                raise ValueError
            price = Price(float(parts[0]), float(parts[1]))
        except ValueError:
            raise PriceError(f"line {number} {raw.strip()!r}: expected {PRICE_LINE_FORMAT!r}") from None
        if not all(math.isfinite(p) and 0 <= p <= MAX_PRICE for p in (price.input_per_million,
                                                                        price.output_per_million)):
            raise PriceError(f"line {number} {raw.strip()!r}: prices must be finite, not negative and at most "
                             f"{MAX_PRICE:g} dollars per million tokens")
        prices[model.strip()] = price
    return prices


def price_table(overrides: Mapping[str, Price]) -> dict[str, Price]:
    return {**BUILTIN_PRICES, **overrides}


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
