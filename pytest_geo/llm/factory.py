"""Building a backend from settings: the mock, the OpenAI SDK client for the default
server or an endpoint (llm/endpoints.py), or a registered provider's client."""

from __future__ import annotations

import gc
import os
import sys
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from pytest_geo.llm.base import ChatClient
from pytest_geo.llm.endpoints import Endpoint, describe
from pytest_geo.local_server import PLACEHOLDER_KEY, placeholder_key_host
from pytest_geo.settings import Settings

if TYPE_CHECKING:
    from pytest_geo.llm.openai_client import OpenAIChatClient

SDK_CLIENT_MODULE = "pytest_geo.llm.openai_client"

MISSING_KEY = (
    "no model credentials: set OPENAI_API_KEY (and {base_url} or OPENAI_BASE_URL for an "
    "OpenAI-compatible server), or run offline with the mock ({mock} or GEO_EVAL_MOCK=1)"
)
# The flags a message names, per front end: each names its own.
PLUGIN_FLAGS = {"base_url": "--geo-base-url", "mock": "--geo-mock",
                "base_url_sources": "--geo-base-url, geo_base_url or OPENAI_BASE_URL"}
EGEO_FLAGS = {"base_url": "--base-url", "mock": "--mock", "base_url_sources": "--base-url or OPENAI_BASE_URL"}


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


def _control_character(url: str) -> str | None:
    """Where `url` holds an ASCII control character (a newline pasted with it, a NUL),
    which the SDK refuses with an InvalidURL traceback (and which, sent, would split a
    header); None when it holds none."""
    for position, char in enumerate(url):
        if char.isascii() and not char.isprintable():
            # Doubled braces: the message is a template that names each front end's flags.
            return f"the base URL ({{base_url_sources}}) holds a control character ({char!r} at position {position}); "\
                   "remove it"
    return None


class ClientSetupError(Exception):
    """The client cannot be built; the message says how to fix it, naming the plugin's
    flags unless a front end asks for its own (`naming`)."""

    def __init__(self, template: str) -> None:
        super().__init__(template.format(**PLUGIN_FLAGS))
        self.template = template

    def naming(self, flags: dict[str, str]) -> str:
        return self.template.format(**flags)


def sdk_client_class() -> type[OpenAIChatClient]:
    """The SDK-backed client class, importing the `openai` SDK on first use.

    That import is most of a run's start-up, and it leaves tens of thousands of objects
    (the SDK's modules and pydantic models) that live as long as the process. So the
    garbage there is now is collected first (finalizers run, and pytest reports what they
    raise, as they would have), the cyclic GC is paused during the import (the collections
    it would trigger walk a growing heap and free almost nothing), and everything alive
    after it is frozen (`gc.freeze()`): the run's full collections, pytest's two at exit
    and the interpreter's last ones no longer walk it. What is made afterwards (rows, the
    tests' objects and their garbage) is collected as before.
    """
    if SDK_CLIENT_MODULE not in sys.modules:
        gc.collect()
        enabled = gc.isenabled()
        gc.disable()
        try:
            __import__(SDK_CLIENT_MODULE)
            gc.freeze()
        finally:
            if enabled:
                gc.enable()
    from pytest_geo.llm.openai_client import OpenAIChatClient

    return OpenAIChatClient


def literal(text: str) -> str:
    """`text` as a ClientSetupError template (whose braces name flags) shows it."""
    return text.replace("{", "{{").replace("}", "}}")


def endpoint_key(endpoint: Endpoint) -> str | None:
    """The key of `endpoint`, from its own variable only; None for an endpoint that takes
    none. Raises ClientSetupError naming the variable when it is unset."""
    if endpoint.key_variable is None:
        return None
    key = os.environ.get(endpoint.key_variable, "").strip()
    if not key:
        raise ClientSetupError(literal(f"{describe(endpoint)} needs its key in {endpoint.key_variable}, which is not "
                                       "set (a key goes only to its own endpoint)"))
    return key


def endpoint_client(settings: Settings, endpoint: Endpoint) -> ChatClient:
    """The backend of `endpoint` (`settings` already carry its URL and timeout), with the
    key of its own variable: a registered provider's client, else the OpenAI SDK's."""
    api_key = endpoint_key(endpoint)
    if _has_credentials(endpoint.base_url):
        raise ClientSetupError(literal(f"{describe(endpoint)}: its base URL holds a user name or password "
                                       "(user:password@host): remove them and name a key variable"))
    if _control_character(endpoint.base_url) is not None:
        raise ClientSetupError(literal(f"{describe(endpoint)}: its base URL holds a control character; remove it"))
    if endpoint.provider is not None:
        from pytest_geo.llm.providers import ProviderError, load_provider

        try:
            provider = load_provider(endpoint.provider)
        except ProviderError as exc:
            raise ClientSetupError(literal(str(exc))) from None
        if provider is None:
            raise ClientSetupError(literal(f"{describe(endpoint)}: provider {endpoint.provider!r} is not installed"))
        return provider.client(endpoint.base_url, api_key, settings)
    return sdk_client_class()(
        api_key=api_key or PLACEHOLDER_KEY,  # the SDK needs one; a server that takes none ignores it
        base_url=endpoint.base_url,
        timeout=settings.timeout,
        max_retries=settings.max_retries,
    )


def build_client(settings: Settings, endpoint: Endpoint | None = None) -> ChatClient:
    """The mock (for every endpoint), else the backend of `endpoint`, else of the default server."""
    if settings.mock:
        from pytest_geo.llm.mock import MockClient

        return MockClient()
    if endpoint is not None:
        return endpoint_client(settings, endpoint)
    api_key = os.environ.get("OPENAI_API_KEY", "").strip()
    if not api_key and placeholder_key_host(settings) is not None:
        api_key = PLACEHOLDER_KEY
    if not api_key:
        raise ClientSetupError(MISSING_KEY)
    base_url = settings.base_url or os.environ.get("OPENAI_BASE_URL") or None
    if base_url is not None and _has_credentials(base_url):
        raise ClientSetupError(CREDENTIALS_IN_URL)
    if base_url is not None and (bad := _control_character(base_url)) is not None:
        raise ClientSetupError(bad)
    return sdk_client_class()(
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
