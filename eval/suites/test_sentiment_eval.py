"""A Python eval suite (Kedi's `@eval: sentiment:` example): the procedure is ordinary
code, the metric calls it explicitly and returns (score, feedback)."""

from __future__ import annotations

import pytest_geo

POSITIVE = {"loved", "delightful", "great", "excellent", "surprise"}
NEGATIVE = {"hated", "awful", "broken", "refund"}


def sentiment(text: str) -> str:
    words = {w.strip(".,!?").lower() for w in text.split()}
    return "negative" if words & NEGATIVE and not words & POSITIVE else "positive"


sentiment_eval = pytest_geo.suite(
    sentiment,
    data={"examples": [("Loved it", {"label": "positive"}), ("Hated it", {"label": "negative"})]},
    test_data={
        "examples": [
            ("A delightful surprise", {"label": "positive"}),
            ("Arrived broken, asked for a refund", {"label": "negative"}),
            ("Not great, not awful", {"label": "negative"}),
        ]
    },
    threshold=0.5,
    markers=["fast"],
)


@sentiment_eval.metric
def accuracy(examples: str, expected: dict[str, str]) -> tuple[bool, str]:
    got = sentiment(examples)
    return got == expected["label"], "" if got == expected["label"] else f"{examples!r}: said {got}"
