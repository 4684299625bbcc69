"""A model's price, the one money type every layer shares (settings carry prices the
user gave; llm/prices.py holds the built-in table)."""

from __future__ import annotations

from dataclasses import dataclass

# The Batch API bills its answers at half the list price (OpenAI's batch discount).
BATCH_PRICE_FACTOR = 0.5
NANO_PER_DOLLAR = 1_000_000_000  # costs are counted in integer nano-dollars: exact sums, plain data


@dataclass(frozen=True)
class Price:
    """US dollars per million tokens; `cached_input_per_million`, for prompt tokens the
    provider's prompt cache served (None: the model has no prompt caching, the input price);
    `cache_write_per_million`, for prompt tokens written to a cache the request asked for
    (Anthropic's `cache_control`, 1.25x its input price; None: the input price)."""

    input_per_million: float
    output_per_million: float
    cached_input_per_million: float | None = None
    cache_write_per_million: float | None = None

    def nanodollars(self, prompt_tokens: int, completion_tokens: int, batch: bool = False,
                    cached_tokens: int = 0, written_tokens: int = 0) -> int:
        """What the tokens cost; `cached_tokens` of the prompt tokens (at most all of them)
        at the cached-input price, `written_tokens` of the rest at the cache-write price."""
        cached = min(cached_tokens, prompt_tokens)
        written = min(written_tokens, prompt_tokens - cached)
        cached_price = self.input_per_million if self.cached_input_per_million is None \
            else self.cached_input_per_million
        write_price = self.input_per_million if self.cache_write_per_million is None \
            else self.cache_write_per_million
        # dollars per million tokens = nano-dollars per thousandth of a token: x 1000 per token
        listed = ((prompt_tokens - cached - written) * self.input_per_million + cached * cached_price
                  + written * write_price + completion_tokens * self.output_per_million) * 1000
        return round(listed * (BATCH_PRICE_FACTOR if batch else 1.0))
