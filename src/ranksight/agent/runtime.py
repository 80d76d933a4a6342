"""The agent: collectors -> batcher -> publisher, plus a small NATS service for its own status.

:class:`AgentRuntime` owns one task group: the publisher, the batcher's timer, one task per collector, and the service.
A collector that fails is reported in its health and retried at its interval; the agent keeps running. A collector whose
source is missing on this node is ``absent`` and idle.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from nats.aio.client import Client
from nats.micro import add_service
from nats.micro.request import Request

from ranksight.agent.backoff import backoff_s
from ranksight.agent.batcher import Batcher
from ranksight.agent.collector_settings import CollectorSettings
from ranksight.agent.collectors.base import (
    Collector,
    CollectorUnavailable,
    Emit,
    PolledCollector,
    StreamingCollector,
)
from ranksight.agent.collectors.registry import COLLECTORS
from ranksight.agent.publisher import Publisher
from ranksight.agent.settings import AgentView
from ranksight.core.aio import cancel_all
from ranksight.core.natsconn import NatsProblems, connect, disconnect
from ranksight.core.version import ranksight_version, service_version
from ranksight.schemas.records import CollectorHealth, PublisherStats, Record
from ranksight.schemas.structs import to_builtins
from ranksight.schemas.subjects import Subjects, require_token

log = logging.getLogger(__name__)

CommandHandler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


class AgentContext:
    """What collectors may use: identity, settings, the NATS connection, and command registration."""

    def __init__(
        self, settings: AgentView, nc: Client, publisher: Publisher, batcher: Batcher, incarnation: str
    ):
        self.settings = settings
        self.subjects = Subjects(settings.subject_prefix)
        self.cluster = settings.cluster
        self.node = settings.agent.node
        self.incarnation = incarnation
        self.version = ranksight_version()
        self.started_ns = time.time_ns()
        self.nc = nc
        self.publisher = publisher
        self.batcher = batcher
        self.collectors: dict[str, Collector] = {}
        self.commands: dict[str, CommandHandler] = {}

    def health_snapshot(self) -> list[CollectorHealth]:
        return [c.health.snapshot() for c in self.collectors.values()]

    def publisher_stats(self) -> PublisherStats:
        return self.publisher.stats

    def add_command(self, name: str, handler: CommandHandler) -> None:
        """Register a command on ``<prefix>.agent.<cluster>.<node>.<name>`` (only known commands are ever run)."""
        self.commands[name] = handler


class AgentRuntime:
    def __init__(self, settings: AgentView, only: Sequence[str] | None = None) -> None:
        require_token("cluster", settings.cluster)
        require_token("agent.node", settings.agent.node)
        self.settings = settings
        self.only = set(only) if only else None
        self.incarnation = uuid.uuid4().hex[:16]
        self.ctx: AgentContext | None = None
        self.ready = asyncio.Event()
        self.nats_problems = NatsProblems()

    async def run(self, stop: asyncio.Event) -> None:
        cfg = self.settings.agent
        # a refused subject is logged with the subject, not left to time out silently
        nc = await connect(self.settings.nats, f"ranksight-agent:{cfg.node}", self.nats_problems)
        js = nc.jetstream(publish_async_max_pending=cfg.max_inflight * 2)
        publisher = Publisher(js, cfg.queue_max_messages, cfg.max_inflight, cfg.publish_timeout_s)
        subjects = Subjects(self.settings.subject_prefix)
        batcher = Batcher(
            publisher, subjects, self.settings.cluster, cfg.node, self.incarnation,
            cfg.batch_max_records, cfg.batch_max_bytes, cfg.batch_max_delay_s, cfg.wire_format,
        )  # fmt: skip
        ctx = self.ctx = AgentContext(self.settings, nc, publisher, batcher, self.incarnation)
        ctx.add_command("status", self._status)
        for name, cls in COLLECTORS.items():
            section: CollectorSettings = getattr(cfg.collectors, name)
            if section.enabled and (self.only is None or name in self.only):
                ctx.collectors[name] = cls(ctx, section)
        tasks = [asyncio.create_task(publisher.run(), name="publisher"), asyncio.create_task(batcher.run())]
        tasks += [asyncio.create_task(self._drive(c), name=c.name) for c in ctx.collectors.values()]
        service = await self._start_service(ctx)
        log.info(
            "agent %s on %s started (%s)", self.incarnation, cfg.node, ", ".join(ctx.collectors) or "none"
        )
        self.ready.set()
        try:
            await stop.wait()
        finally:
            await cancel_all(tasks[2:])
            # Closes may talk to NATS (the RAS lease): together, bounded, so a NATS that is gone delays the stop by
            # one timeout, not one per collector.
            closes = [collector.close() for collector in ctx.collectors.values()]
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*closes, return_exceptions=True), cfg.publish_timeout_s)
            if nc.is_connected:  # with NATS away nothing can be acknowledged: do not wait for it
                with contextlib.suppress(TimeoutError):  # a full queue waits for room
                    await asyncio.wait_for(batcher.flush(), cfg.publish_timeout_s)
                await publisher.flush(timeout=cfg.publish_timeout_s)
            if publisher.stats.pending:
                log.warning("agent stopping with %d unacknowledged messages", publisher.stats.pending)
            await cancel_all(tasks[:2])
            with contextlib.suppress(Exception):
                await asyncio.wait_for(service.stop(), cfg.publish_timeout_s)
            await disconnect(nc, cfg.publish_timeout_s, drain=True)

    async def _drive(self, collector: Collector) -> None:
        # A source may appear after the agent starts (a job creates its Inspector dump directory, a driver loads):
        # an absent collector checks again every redetect_s.
        while not await self._detect(collector):  # noqa: ASYNC110 - polling the source is the point
            await asyncio.sleep(self.settings.agent.redetect_s)
        ctx = self.ctx
        assert ctx is not None

        async def emit(records: Sequence[Record], on_ack: Callable[[], None] | None = None, kind: str | None = None,
                       ttl: float | None = None, max_delay_s: float | None = None) -> None:  # fmt: skip
            await ctx.batcher.add(
                kind or collector.kind, records, ttl or collector.ttl, collector.durable, on_ack, max_delay_s
            )

        if isinstance(collector, StreamingCollector):
            await self._drive_streaming(collector, emit)
        elif isinstance(collector, PolledCollector):
            await self._drive_polled(collector, emit)

    @staticmethod
    async def _detect(collector: Collector) -> bool:
        health = collector.health
        try:
            present = await collector.detect()
        except CollectorUnavailable as exc:
            present, health.last_error = False, str(exc)
        except Exception as exc:
            health.failure(exc)
            present = False
        if not present:
            health.state = "absent" if health.state != "error" else "error"
        return present

    async def _drive_polled(self, collector: PolledCollector, emit: Emit) -> None:
        interval = collector.settings.interval_s
        while True:
            started = time.monotonic()
            try:
                records = await collector.collect()
            except CollectorUnavailable as exc:
                collector.health.state, collector.health.last_error = "absent", str(exc)
            except Exception as exc:
                collector.health.failure(exc, time.monotonic() - started)
            else:
                collector.health.success(time.monotonic() - started)
                await emit(records)
            await asyncio.sleep(max(0.0, interval - (time.monotonic() - started)))

    async def _drive_streaming(self, collector: StreamingCollector, emit: Emit) -> None:
        restarts = 0
        while True:
            started, delay = time.monotonic(), backoff_s(restarts, 1.0, 60.0)
            collector.health.running()
            try:
                await collector.run(emit)
                return
            except CollectorUnavailable as exc:
                collector.health.state, collector.health.last_error = "absent", str(exc)
            except Exception as exc:
                collector.health.failure(exc, time.monotonic() - started)
                log.warning("collector %s failed: %s; restarting in %.0fs", collector.name, exc, delay)
            await asyncio.sleep(delay)
            restarts += 1

    async def _start_service(self, ctx: AgentContext) -> Any:
        service = await add_service(
            ctx.nc,
            name="ranksight-agent",
            version=service_version(ctx.version),
            description="ranksight node agent",
            metadata={"cluster": ctx.cluster, "node": ctx.node, "incarnation": ctx.incarnation},
        )
        group = service.add_group(name=ctx.subjects.agent_group(ctx.cluster, ctx.node))
        for name, handler in ctx.commands.items():
            await group.add_endpoint(name=name, handler=_json_endpoint(handler))
        return service

    async def _status(self, request: dict[str, Any]) -> dict[str, Any]:
        ctx = self.ctx
        assert ctx is not None
        return {
            "cluster": ctx.cluster,
            "node": ctx.node,
            "incarnation": ctx.incarnation,
            "version": ctx.version,
            "started_ns": ctx.started_ns,
            "collectors": to_builtins(ctx.health_snapshot()),
            "publisher": to_builtins(ctx.publisher_stats()),
        }


def _json_endpoint(handler: CommandHandler) -> Callable[[Request], Awaitable[None]]:
    async def endpoint(request: Request) -> None:
        try:
            body = json.loads(request.data) if request.data else {}
            if not isinstance(body, dict):
                raise ValueError("request body must be a JSON object")
        except ValueError as exc:
            await request.respond_error("400", f"bad request: {exc}")
            return
        try:
            result = await handler(body)
        # an invalid or refused command (msgspec's validation errors are ValueErrors too)
        except ValueError as exc:
            await request.respond_error("400", f"bad request: {exc}")
            return
        except Exception as exc:
            await request.respond_error("500", f"{type(exc).__name__}: {exc}")
            return
        await request.respond(json.dumps(result).encode())

    return endpoint
