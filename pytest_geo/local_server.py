"""What changes for a model server on this machine or a private network.

Such a server is often a CPU model answering one call at a time in seconds to minutes: a
long timeout, and auto concurrency starting at one row. It grows while calls come back as
fast and backs off when they queue (llm/adaptive.py), so a fast one (a GPU server, a
loopback fake) gets the same bound as a hosted API. Local servers (vLLM, Ollama,
llama.cpp) ignore the API key, so one without a key gets a placeholder."""

from __future__ import annotations

import ipaddress
import os
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from pytest_geo.settings import Settings

LOCAL_TIMEOUT = 600.0
LOCAL_START_CONCURRENCY = 1
# Sent to a local server when no key is set: the SDK refuses to start without one. Never
# sent anywhere else.
PLACEHOLDER_KEY = "sk-no-key-local-server"


def local_host(url: str | None) -> str | None:
    """The host when `url` points to this machine or a private network, else None."""
    try:
        host = urlsplit(url if url and "//" in url else f"//{url or ''}").hostname
    except ValueError:
        return None
    if not host:
        return None
    if host == "localhost" or host.endswith(".localhost"):
        return host
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None
    return host if address.is_loopback or address.is_private or address.is_link_local else None


def server_is_local(base_url: str | None) -> bool:
    """The run's server (the URL given, else OPENAI_BASE_URL) is on this machine or a
    private network."""
    return local_host(base_url or os.environ.get("OPENAI_BASE_URL")) is not None


def placeholder_key_host(settings: Settings) -> str | None:
    """The local server a placeholder key goes to, when the run has no key of its own."""
    if settings.mock or os.environ.get("OPENAI_API_KEY", "").strip():
        return None
    return local_host(settings.base_url or os.environ.get("OPENAI_BASE_URL"))
