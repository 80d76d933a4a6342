"""``heartbeat``: hostname, agent version, incarnation, the health of every collector and the batch jobs on the node
(from the Slurm prolog's files); proves the path end to end."""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Sequence

from ranksight.agent.collectors.base import PolledCollector
from ranksight.agent.collectors.settings import HeartbeatSettings
from ranksight.agent.collectors.slurm_jobs import read_jobs
from ranksight.schemas.records import HeartbeatRecord, Record


class HeartbeatCollector(PolledCollector):
    name = "heartbeat"
    kind = "heartbeat"

    async def collect(self) -> Sequence[Record]:
        ctx = self.ctx
        settings: HeartbeatSettings = ctx.settings.agent.collectors.heartbeat
        jobs = await asyncio.to_thread(read_jobs, settings.jobs_dir, settings.max_jobs)
        return [
            HeartbeatRecord(
                hostname=socket.gethostname(),
                version=ctx.version,
                pid=os.getpid(),
                started_ns=ctx.started_ns,
                collectors=ctx.health_snapshot(),
                publisher=ctx.publisher_stats(),
                jobs=jobs,
            )
        ]
