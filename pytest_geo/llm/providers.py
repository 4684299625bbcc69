"""Model APIs that do not speak the OpenAI protocol, added by other packages.

A package registers a provider under the entry-point group `pytest_geo.providers`; the
entry point's name is the model prefix that routes to it, as `anthropic/` routes to a
known endpoint (llm/endpoints.py)::

    # pyproject.toml of the package
    [project.entry-points."pytest_geo.providers"]
    acme = "acme_geo:AcmeProvider"

    # acme_geo.py
    class AcmeProvider:
        base_url = "https://api.acme.example/v2"
        key_variable = "ACME_API_KEY"  # None: no key

        def client(self, base_url, api_key, settings):
            return AcmeClient(base_url, api_key, timeout=settings.timeout)

The entry point names a callable taking no arguments (the class) that returns the
`Provider`. Its client speaks the `ChatClient` protocol (llm/base.py): it receives each
request with the prefix stripped from `model` and raises `ModelError` for a failed call
(`transport=True` for a failure of the server, which the breaker counts). The run builds
the same stack over it as over the OpenAI client (llm/stack.py); a client with a
`base_url` attribute also gets the answer cache. A `geo_endpoints` line with the
provider's name points it at another server or key variable.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from pytest_geo.llm.endpoints import Endpoint

if TYPE_CHECKING:
    from pytest_geo.llm.base import ChatClient
    from pytest_geo.settings import Settings

GROUP = "pytest_geo.providers"


class Provider(Protocol):
    """A model API with its own wire format (see the module)."""

    base_url: str
    key_variable: str | None

    def client(self, base_url: str, api_key: str | None, settings: Settings) -> ChatClient: ...


class ProviderError(Exception):
    """A registered provider that cannot be loaded; the message names its entry point."""


def load_provider(name: str) -> Provider | None:
    """The provider registered under `name`, None when none is; raises ProviderError
    when its entry point fails to load."""
    from importlib.metadata import entry_points

    for entry in entry_points(group=GROUP):
        if entry.name == name:
            try:
                provider: Provider = entry.load()()
                base_url, key_variable = provider.base_url, provider.key_variable
            except Exception as exc:  # a third party's import or constructor: say which
                raise ProviderError(f"provider {name!r} ({entry.value}, entry point group {GROUP}) cannot be "
                                    f"loaded: {type(exc).__name__}: {exc}") from None
            if not isinstance(base_url, str) or not (key_variable is None or isinstance(key_variable, str)):
                raise ProviderError(f"provider {name!r} ({entry.value}): base_url must be a string and "
                                    "key_variable a string or None")
            return provider
    return None


def registered_endpoint(name: str) -> Endpoint | None:
    """The endpoint of the provider registered under `name`, if one is."""
    provider = load_provider(name)
    if provider is None:
        return None
    return Endpoint(name, provider.base_url.rstrip("/"), provider.key_variable, provider=name)
