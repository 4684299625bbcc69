"""The HTML report's usage per endpoint: the JSON report's `endpoint_usage` counts, the
cost where every answer had a price, the endpoint's name as text."""

from __future__ import annotations

import pytest
from test_html_flags import parsed

pytestmark = pytest.mark.unit

COUNTS = {"calls": 9, "cache_hits": 1, "retries": 2, "errors": 0, "prompt_tokens": 1234, "completion_tokens": 56}


def test_each_endpoints_calls_tokens_and_cost() -> None:
    page = parsed({"suites": [], "usage": {"ranker": COUNTS}, "endpoint_usage": {
        "ep2": {**COUNTS, "cost_nanousd": 123_400, "unpriced_calls": 0},
        "<b>ep1</b>": {**COUNTS, "calls": 3, "cost_nanousd": 5, "unpriced_calls": 3},  # no price: no cost
        "default": {**COUNTS, "calls": 4, "cost_nanousd": 25_000_000_000},
    }})
    assert page.tables["endpoint-usage"] == [
        ["<b>ep1</b>", "3", "1", "2", "0", "1234", "56", ""],
        ["default", "4", "1", "2", "0", "1234", "56", "$25.00"],
        ["ep2", "9", "1", "2", "0", "1234", "56", "$0.0001234"],
    ]
    assert "b" not in page.tags


def test_a_run_on_the_default_server_alone_has_no_endpoint_table() -> None:
    page = parsed({"suites": [], "usage": {"ranker": COUNTS}})
    assert "usage" in page.tables and "endpoint-usage" not in page.tables
