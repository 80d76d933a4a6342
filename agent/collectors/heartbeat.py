"""``heartbeat``: hostname, agent version, incarnation and the health of every collector; proves the path end to end."""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence

from agent.collectors.base import PolledCollector
from schemas.records import HeartbeatRecord, Record


class HeartbeatCollector(PolledCollector):
    name = "heartbeat"
    kind = "heartbeat"

    async def collect(self) -> Sequence[Record]:
        ctx = self.ctx
        return [
            HeartbeatRecord(
                hostname=socket.gethostname(),
                version=ctx.version,
                pid=os.getpid(),
                started_ns=ctx.started_ns,
                collectors=ctx.health_snapshot(),
                publisher=ctx.publisher_stats(),
            )
        ]
