"""``probe``: runs this node's probe server, announces where it listens, and runs the probes the planner commands.

The aggregator's planner decides who probes whom (``aggregator/probes.py``); this collector only obeys the ``probe``
command (``<prefix>.agent.<cluster>.<node>.probe``, body :class:`~schemas.records.probe.ProbeCommand`) when it aims at
a registered agent's probe endpoint within the size caps (``agent/probe/targets.py``), measures with the probe client
and publishes the result as a ``probe`` record, which it also returns as the command's answer.
A failed measurement is a record too (``error`` set): a link that cannot be probed is a finding, not a crash.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import ipaddress
import socket
import time
from typing import TYPE_CHECKING, Any

import msgspec
from nats.aio.msg import Msg

from ranksight.agent.collectors.base import Emit, StreamingCollector
from ranksight.agent.probe.client import ProbeBudget, ProbeError, run_probe
from ranksight.agent.probe.server import ProbeServer, ServerLimits, parse_networks
from ranksight.agent.probe.targets import ProbeTargets
from ranksight.schemas.codec import DecodeError, decode_event
from ranksight.schemas.records import ProbeEndpointRecord, ProbeRecord
from ranksight.schemas.records.probe import ProbeCommand
from ranksight.schemas.structs import to_builtins
from ranksight.schemas.subjects import SubjectError
from ranksight.schemas.wire import event_type

# The probe settings that are the server's limits (same names).
SERVER_LIMITS = {f.name for f in dataclasses.fields(ServerLimits)}

if TYPE_CHECKING:
    from ranksight.agent.collectors.settings import ProbeSettings
    from ranksight.agent.runtime import AgentContext


class ProbeCollector(StreamingCollector):
    name = "probe"
    kind = "probe"
    durable = True
    settings: ProbeSettings

    def __init__(self, ctx: AgentContext, settings: ProbeSettings) -> None:  # type: ignore[override]
        super().__init__(ctx, settings)
        # the limits the settings name; the others keep the server's defaults
        limits = ServerLimits(
            **{name: getattr(settings, name) for name in SERVER_LIMITS if hasattr(settings, name)}
        )
        self.server = ProbeServer(settings.listen_host, settings.port, parse_networks(settings.allow), limits)
        self.targets = ProbeTargets(settings.max_bytes, settings.max_seconds, settings.max_peers,
                                    parse_networks(settings.allow), settings.max_bytes_per_peer_per_minute)  # fmt: skip
        self._emit: Emit | None = None
        self._probing = asyncio.Lock()  # one outgoing probe at a time: the planner never asks for two
        ctx.add_command("probe", self.command)

    async def run(self, emit: Emit) -> None:
        announcements = self.ctx.subjects.kind_filter(self.ctx.cluster, "probe_endpoint")
        sub = await self.ctx.nc.subscribe(announcements, cb=self._on_endpoint)
        await self.server.start()
        self._emit = emit
        try:
            while True:
                endpoint = ProbeEndpointRecord(addrs=await self._addresses(), port=self.server.port,
                                               rail=self.settings.rail)  # fmt: skip
                await self.ctx.batcher.add("probe_endpoint", [endpoint], 3 * self.settings.interval_s, False)
                self.health.success(0.0)  # serving and announced
                await asyncio.sleep(self.settings.interval_s)
        finally:
            self._emit = None
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
            await self.server.stop()

    async def _on_endpoint(self, msg: Msg) -> None:
        try:
            # who announced: the subject (NATS permissions bind it to the publisher), not the payload
            node = self.ctx.subjects.parse_event(msg.subject).node
            envelope = decode_event(msg.data)
        except (SubjectError, DecodeError):
            return  # not an announcement this agent can use; the aggregator dead-letters it
        if envelope.type != event_type("probe_endpoint"):
            return
        for endpoint in envelope.records:
            self.targets.observe(node, endpoint.addrs, endpoint.port, envelope.ttl, time.monotonic())

    async def close(self) -> None:
        await self.server.stop()

    async def command(self, body: dict[str, Any]) -> dict[str, Any]:
        cmd = msgspec.convert(body, ProbeCommand)
        self.targets.check(cmd, time.monotonic())
        if self._emit is None:
            raise RuntimeError("the probe collector is not running on this node")
        budget = ProbeBudget(echo_count=cmd.echo_count, bandwidth=cmd.mode == "full", bytes=cmd.bytes,
                             seconds=cmd.seconds)  # fmt: skip
        record = ProbeRecord(
            src=self.ctx.node, dst=cmd.peer, dst_addr=cmd.addr, mode=cmd.mode, skipped=cmd.skipped
        )
        async with self._probing:
            try:
                result = await run_probe(cmd.addr, cmd.port, budget)
            except ProbeError as exc:
                record = msgspec.structs.replace(record, error=str(exc))
            else:
                record = msgspec.structs.replace(record, **result.as_dict())
        await self._emit([record])
        return to_builtins(record)

    async def _addresses(self) -> list[str]:
        if self.settings.advertise:
            return list(self.settings.advertise)
        infos = await asyncio.get_running_loop().getaddrinfo(
            socket.gethostname(), None, type=socket.SOCK_STREAM
        )
        addrs = list(dict.fromkeys(str(info[4][0]) for info in infos))
        routable = [a for a in addrs if not ipaddress.ip_address(a.split("%", 1)[0]).is_loopback]
        return routable or addrs or ["127.0.0.1"]
