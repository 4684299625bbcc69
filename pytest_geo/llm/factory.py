"""Building the run's one client from settings: the mock, or the OpenAI SDK."""

from __future__ import annotations

import os
from urllib.parse import urlsplit

from pytest_geo.llm.base import ChatClient
from pytest_geo.settings import Settings

MISSING_KEY = (
    "no model credentials: set OPENAI_API_KEY (and --geo-base-url or OPENAI_BASE_URL for an "
    "OpenAI-compatible server), or run offline with the mock (pytest --geo-mock, egeo --mock, or GEO_EVAL_MOCK=1)"
)


CREDENTIALS_IN_URL = (
    "the base URL (--geo-base-url, geo_base_url or OPENAI_BASE_URL) holds a user name or password "
    "(user:password@host): remove them and give the key in OPENAI_API_KEY"
)


def _has_credentials(url: str) -> bool:
    """`http://user:pw@host/v1`: the SDK fails every call on it, and the URL would carry
    a secret into messages; refused at start instead (the message never shows the URL)."""
    try:
        parts = urlsplit(url)
        return parts.username is not None or parts.password is not None
    except ValueError:  # an unparsable URL: the SDK says what is wrong with it
        return "@" in url.partition("://")[2].partition("/")[0]


class ClientSetupError(Exception):
    """The client cannot be built; the message says how to fix it."""


def build_client(settings: Settings) -> ChatClient:
    if settings.mock:
        from pytest_geo.llm.mock import MockClient

        return MockClient()
    api_key = os.environ.get("OPENAI_API_KEY", "").strip()
    if not api_key:
        raise ClientSetupError(MISSING_KEY)
    from pytest_geo.llm.openai_client import OpenAIChatClient

    base_url = settings.base_url or os.environ.get("OPENAI_BASE_URL") or None
    if base_url is not None and _has_credentials(base_url):
        raise ClientSetupError(CREDENTIALS_IN_URL)
    return OpenAIChatClient(
        api_key=api_key,
        base_url=base_url,
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
