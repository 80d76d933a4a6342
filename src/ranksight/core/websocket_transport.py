"""nats-py imports aiohttp for its WebSocket transport alone, and goes on without it when the import fails. aiohttp
costs about 10 MiB of memory and 0.2 s of start-up; a process whose NATS servers are not ``ws``/``wss`` URLs never
uses it. Loaded before nats-py is, :func:`skip_websocket_transport` makes ``import aiohttp`` fail (a ``None`` entry in
``sys.modules``, Python's own way to refuse an import); :func:`allow_websocket_transport` takes that back for the rest
of a process that goes on to other work (a command run inside a test process)."""

from __future__ import annotations

import sys

_TRANSPORT = "aiohttp"


def websocket_urls(nats_url: str) -> bool:
    return any(url.strip().lower().startswith(("ws://", "wss://")) for url in nats_url.split(","))


def skip_websocket_transport(nats_url: str) -> bool:
    """Refuse aiohttp unless a server of ``nats_url`` needs it or it is loaded already; whether it was refused."""
    if websocket_urls(nats_url) or _TRANSPORT in sys.modules:
        return False
    sys.modules[_TRANSPORT] = None  # type: ignore[assignment]  # None: "import aiohttp" raises ImportError
    return True


def allow_websocket_transport() -> None:
    if _TRANSPORT in sys.modules and sys.modules[_TRANSPORT] is None:
        del sys.modules[_TRANSPORT]
