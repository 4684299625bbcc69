"""A model's price, the one money type every layer shares (settings carry prices the
user gave; llm/prices.py holds the built-in table)."""

from __future__ import annotations

from dataclasses import dataclass

# The Batch API bills its answers at half the list price (OpenAI's batch discount).
BATCH_PRICE_FACTOR = 0.5
NANO_PER_DOLLAR = 1_000_000_000  # costs are counted in integer nano-dollars: exact sums, plain data


@dataclass(frozen=True)
class Price:
    """US dollars per million tokens."""

    input_per_million: float
    output_per_million: float

    def nanodollars(self, prompt_tokens: int, completion_tokens: int, batch: bool = False) -> int:
        # dollars per million tokens = nano-dollars per thousandth of a token: x 1000 per token
        listed = (prompt_tokens * self.input_per_million + completion_tokens * self.output_per_million) * 1000
        return round(listed * (BATCH_PRICE_FACTOR if batch else 1.0))
