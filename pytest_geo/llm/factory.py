"""Building the run's one client from settings: the mock, or the OpenAI SDK."""

from __future__ import annotations

import os

from pytest_geo.llm.base import ChatClient
from pytest_geo.settings import Settings

MISSING_KEY = (
    "no model credentials: set OPENAI_API_KEY (and {base_url} or OPENAI_BASE_URL for an "
    "OpenAI-compatible server), or run offline with the mock ({mock} or GEO_EVAL_MOCK=1)"
)
# The flags a message names, per front end: each names its own.
PLUGIN_FLAGS = {"base_url": "--geo-base-url", "mock": "--geo-mock"}
EGEO_FLAGS = {"base_url": "--base-url", "mock": "--mock"}


class ClientSetupError(Exception):
    """The client cannot be built; the message says how to fix it, naming the plugin's
    flags unless a front end asks for its own (`naming`)."""

    def __init__(self, template: str) -> None:
        super().__init__(template.format(**PLUGIN_FLAGS))
        self.template = template

    def naming(self, flags: dict[str, str]) -> str:
        return self.template.format(**flags)


def build_client(settings: Settings) -> ChatClient:
    if settings.mock:
        from pytest_geo.llm.mock import MockClient

        return MockClient()
    api_key = os.environ.get("OPENAI_API_KEY", "").strip()
    if not api_key:
        raise ClientSetupError(MISSING_KEY)
    from pytest_geo.llm.openai_client import OpenAIChatClient

    return OpenAIChatClient(
        api_key=api_key,
        base_url=settings.base_url or os.environ.get("OPENAI_BASE_URL") or None,
        timeout=settings.timeout,
        max_retries=settings.max_retries,
    )


def with_cache(client: ChatClient, backend: object, settings: Settings) -> ChatClient:
    """Put the response cache in front of `client` when the run wants one and the
    backend names the server it talks to (`base_url`, part of every key). The mock has
    none and is not cached: its answers cost nothing and are already deterministic."""
    namespace = getattr(backend, "base_url", None)
    if not settings.use_cache or settings.cache_dir is None or not isinstance(namespace, str):
        return client
    from pytest_geo.llm.cache import CachedClient

    return CachedClient(client, settings.cache_dir, namespace)
