"""The agent process (``python -m ranksight.agent``) leaves nats-py's WebSocket transport (aiohttp) unloaded unless a
configured server needs it."""

from __future__ import annotations

import subprocess
import sys

import pytest

PROBE = """
import sys
from ranksight.core.websocket_transport import skip_websocket_transport
skip_websocket_transport(sys.argv[1])
import ranksight.agent.runtime
print(sys.modules.get("aiohttp") is not None)
"""


@pytest.mark.parametrize(
    ("url", "loaded"),
    [
        ("nats://127.0.0.1:4222", False),
        ("tls://a:4222,nats://b:4222", False),
        ("nats://a:4222, WSS://b:443", True),
    ],
)
def test_aiohttp_is_loaded_only_for_websocket_servers(url: str, loaded: bool) -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, url], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == str(loaded)
