"""Hooks pytest-geo adds, for conftest files and other plugins."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pytest_geo.llm.base import ChatClient
    from pytest_geo.settings import Settings


@pytest.hookspec(firstresult=True)
def pytest_geo_make_client(config: pytest.Config, settings: Settings) -> ChatClient | None:
    """Return the chat client of this run's default server instead of the built-in mock
    or OpenAI client: the one every model without an endpoint prefix is sent to
    (llm/endpoints.py; a prefixed model goes to its endpoint, a provider with its own
    wire format is added through the `pytest_geo.providers` entry points, llm/providers.py).

    The run still builds its client stack over it (llm/stack.py: request shaping, the
    cache, the breaker, the concurrency bound, usage accounting). Example, in
    a conftest.py::

        def pytest_geo_make_client(config, settings):
            return MyGatewayClient(settings.models)
    """
