"""Where a model's calls go.

A model named `NAME/rest`, where NAME is a known provider (`KNOWN`), a `geo_endpoints`
entry or a registered provider (llm/providers.py), goes to that endpoint, and `rest` is
the model name sent. Any other model, bare (`gpt-4o-mini`) or with a first part that
names no endpoint (`Qwen/Qwen2.5-7B` on a vLLM server), goes to the run's default
server (--geo-base-url or OPENAI_BASE_URL, with OPENAI_API_KEY), as it always did.
A key goes only to its own endpoint.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit


@dataclass(frozen=True)
class Endpoint:
    """A server models are called on: its OpenAI-compatible base URL, the environment
    variable holding its key (None: it takes none, a local server), and the registered
    provider speaking its wire format (None: the OpenAI protocol)."""

    name: str
    base_url: str
    key_variable: str | None = None
    provider: str | None = None
    batch: bool = False  # offers the OpenAI Batch API (--geo-batch); other endpoints are called directly
    # Models (by name prefix) whose provider caches a prompt only where the request marks it
    # (`cache_control`): their long system prompts are marked (llm/profiles.py, with_cache_mark).
    cache_marks: tuple[str, ...] = ()


# Each provider's OpenAI-compatible base URL and key variable, from its own documentation.
KNOWN: Mapping[str, Endpoint] = {
    "openai": Endpoint("openai", "https://api.openai.com/v1", "OPENAI_API_KEY", batch=True),
    # OpenRouter's prompt-caching guide: Anthropic's models cache only marked content parts.
    # (Anthropic's own OpenAI-compatible endpoint ignores the marks: its docs send caching
    # to the native API.)
    "openrouter": Endpoint("openrouter", "https://openrouter.ai/api/v1", "OPENROUTER_API_KEY",
                           cache_marks=("anthropic/",)),
    "anthropic": Endpoint("anthropic", "https://api.anthropic.com/v1", "ANTHROPIC_API_KEY"),
    "gemini": Endpoint("gemini", "https://generativelanguage.googleapis.com/v1beta/openai", "GEMINI_API_KEY"),
    "deepseek": Endpoint("deepseek", "https://api.deepseek.com", "DEEPSEEK_API_KEY"),
    "together": Endpoint("together", "https://api.together.ai/v1", "TOGETHER_API_KEY"),
    "groq": Endpoint("groq", "https://api.groq.com/openai/v1", "GROQ_API_KEY"),
    "mistral": Endpoint("mistral", "https://api.mistral.ai/v1", "MISTRAL_API_KEY"),
    "fireworks": Endpoint("fireworks", "https://api.fireworks.ai/inference/v1", "FIREWORKS_API_KEY"),
    "ollama": Endpoint("ollama", "http://localhost:11434/v1"),
}

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
KEY_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
LINE_FORMAT = "NAME = BASE_URL [KEY_VARIABLE]"


class EndpointError(ValueError):
    """An endpoint definition that cannot be used; the message says which and why."""


def resolve(model: str, endpoints: Mapping[str, Endpoint]) -> tuple[Endpoint | None, str]:
    """(the endpoint `model` names, the model name sent there); (None, `model`) for the
    default server. `endpoints`: the run's own (settings.endpoints), over `KNOWN` and the
    registered providers."""
    name, slash, rest = model.partition("/")
    if not slash or not rest:
        return None, model
    endpoint = endpoints.get(name) or KNOWN.get(name)
    if endpoint is None:
        from pytest_geo.llm.providers import registered_endpoint

        endpoint = registered_endpoint(name)
    return (endpoint, rest) if endpoint is not None else (None, model)


def parse_endpoint(text: str) -> Endpoint:
    """One `NAME = BASE_URL [KEY_VARIABLE]` definition; raises EndpointError."""
    name, equals, value = text.partition("=")
    name, parts = name.strip(), value.split()
    if not equals or not name or not 1 <= len(parts) <= 2:
        raise EndpointError(f"expected {LINE_FORMAT!r}")
    if not NAME.fullmatch(name):
        raise EndpointError(f"endpoint name {name!r} must be letters, digits, '_', '.' or '-' (no '/')")
    url = parts[0]
    if not url.isprintable():
        raise EndpointError(f"base URL {url!r} holds a control character")
    try:
        split = urlsplit(url)
        usable = split.scheme in ("http", "https") and bool(split.hostname)
    except ValueError:
        usable = False
    if not usable:
        raise EndpointError(f"base URL {url!r} is not an http:// or https:// URL with a host")
    key = parts[1] if len(parts) == 2 else None
    if key is not None and not KEY_VARIABLE.fullmatch(key):
        raise EndpointError(f"key variable {key!r} is not an environment variable name (the key itself "
                            "never goes in a file: name the variable holding it)")
    from pytest_geo.llm.providers import registered_endpoint

    known = KNOWN.get(name) or registered_endpoint(name)
    # A known name moved to another URL (a proxy, a test server) keeps what the name offers.
    return Endpoint(name, url.rstrip("/"), key, provider=known.provider if known else None,
                    batch=known.batch if known else False, cache_marks=known.cache_marks if known else ())


def parse_endpoint_lines(lines: Iterable[str]) -> dict[str, Endpoint]:
    """The ini option geo_endpoints: one definition a line; blank lines and lines starting
    with `#` are skipped. Raises EndpointError naming the line."""
    endpoints: dict[str, Endpoint] = {}
    for number, raw in enumerate(lines, start=1):
        text = raw.strip()
        if not text or text.startswith("#"):
            continue
        try:
            endpoint = parse_endpoint(text)
        except EndpointError as exc:
            raise EndpointError(f"line {number} {text!r}: {exc}") from None
        if endpoint.name in endpoints:
            raise EndpointError(f"line {number} {text!r}: endpoint {endpoint.name!r} is defined twice")
        endpoints[endpoint.name] = endpoint
    return endpoints


def endpoint_flag(text: str) -> Endpoint:
    """egeo's `--endpoint NAME=URL[,KEY_VARIABLE]`, an argparse type."""
    name, _, rest = text.partition("=")
    url, _, key = rest.partition(",")
    try:
        return parse_endpoint(f"{name}={url} {key}")
    except EndpointError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {exc} (expected NAME=URL[,KEY_VARIABLE])") from None


def describe(endpoint: Endpoint) -> str:
    """`endpoint NAME (host)`, for messages."""
    try:
        host = urlsplit(endpoint.base_url).hostname or endpoint.base_url
    except ValueError:
        host = endpoint.base_url
    return f"endpoint {endpoint.name} ({host})"
