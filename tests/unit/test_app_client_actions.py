"""``ranksight.client.on_action``: what the agent sends back over the app socket reaches the callback; anything else
(garbage, other message types, unknown actions) is ignored, and a callback that raises is counted, never fatal."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path
from typing import Any

import msgpack

from ranksight.client import Client


def test_action_requests_reach_the_callback_and_nothing_else_does(tmp_path: Path) -> None:
    path = tmp_path / "app.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    server.bind(str(path))
    server.listen(1)
    got: list[dict[str, Any]] = []
    seen = threading.Event()

    def callback(request: dict[str, Any]) -> None:
        got.append(request)
        seen.set()
        if request["action"] == "exit":
            raise RuntimeError("the training code's own bug")

    c = Client(str(path), heartbeat_interval_s=0)
    c.on_action(callback)
    c.heartbeat(step=1)  # connects
    conn, _ = server.accept()
    try:
        for packet in (b"\xc1 not msgpack", msgpack.packb([1, 2]), msgpack.packb({"t": "marker", "action": "exit"}),
                       msgpack.packb({"v": 1, "t": "action", "action": "rm -rf /"}),
                       msgpack.packb({"v": 1, "t": "action", "action": "exit", "id": "a1", "rule": "gpu_xid",
                                      "reason": "Xid 79"}),
                       msgpack.packb({"v": 1, "t": "action", "action": "checkpoint", "id": "a2", "rule": "straggler",
                                      "reason": "slow", "extra": "ignored"})):  # fmt: skip
            conn.send(packet)
        deadline = time.monotonic() + 10
        while len(got) < 2 and time.monotonic() < deadline:
            seen.wait(0.1)
        assert got == [{"action": "exit", "id": "a1", "rule": "gpu_xid", "reason": "Xid 79"},
                       {"action": "checkpoint", "id": "a2", "rule": "straggler", "reason": "slow"}]  # fmt: skip
        assert (c.actions_received, c.callback_errors) == (2, 1)
        c.heartbeat(step=2)  # the training side goes on as before
        assert c.stats()["sent"] == 2 and c.stats()["dropped"] == 0
    finally:
        conn.close()
        server.close()
