"""Hooks pytest-geo adds, for conftest files and other plugins."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pytest_geo.llm.base import ChatClient
    from pytest_geo.settings import Settings


@pytest.hookspec(firstresult=True)
def pytest_geo_make_client(config: pytest.Config, settings: Settings) -> ChatClient | None:
    """Return the chat client for this run instead of the built-in mock or OpenAI client.

    The run still builds its client stack over it (llm/stack.py: request shaping, the
    cache, the breaker, the concurrency bound, usage accounting). Example, in
    a conftest.py::

        def pytest_geo_make_client(config, settings):
            return MyGatewayClient(settings.models)
    """
