"""The aggregator: durable ingest -> validate -> DuckDB -> live state -> rules -> alerts, plus the query service.

Ingest reads the event stream through a durable pull consumer in batches, commits each batch to DuckDB in one
transaction (on the writer thread), and only then acknowledges it; a crash at any point redelivers what was not
acknowledged, and the store's sequence marks make the redelivery harmless. Sharded (``aggregator.shards.partitions``),
the same loop runs once per partition this shard holds (:mod:`aggregator.shards`), on that partition's durable consumer.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import time
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import duckdb
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, StorageType, StreamConfig, SubjectTransform

from ranksight.aggregator.actions.desk import ActionDesk, cluster_sizes
from ranksight.aggregator.actions.model import Action, ActionFailed, ActionRefused
from ranksight.aggregator.alertmanager import AlertmanagerPush
from ranksight.aggregator.alerts import AlertEngine, Rule
from ranksight.aggregator.api.front import QueryFront
from ranksight.aggregator.api.service import start_services
from ranksight.aggregator.api.sql import SqlError, SqlSandbox
from ranksight.aggregator.hang_forensics import HangForensics
from ranksight.aggregator.history import retention_loop, shard_export_loop
from ranksight.aggregator.http.server import HttpFace
from ranksight.aggregator.ingest.pipeline import BatchResult, Incoming
from ranksight.aggregator.lead import AnalysisLead
from ranksight.aggregator.probes import ProbePlanner
from ranksight.aggregator.profiling import ProfileOnDemand
from ranksight.aggregator.pull import BoundedPull
from ranksight.aggregator.raw_evidence import RawEvidence
from ranksight.aggregator.report import JobNotFound, job_report, write_report
from ranksight.aggregator.rulebook import check_rule_names, every_rule
from ranksight.aggregator.shards import NodeKey, ShardOwner
from ranksight.aggregator.state import NS, LiveState
from ranksight.aggregator.store import Store, out_of_memory
from ranksight.core.aio import cancel_all
from ranksight.core.kvlease import LEASE_VALUE_BYTES, key_value
from ranksight.core.natsconn import NatsProblems, connect, disconnect, once_jetstream_answers
from ranksight.core.version import ranksight_version
from ranksight.schemas.alerts import Alert
from ranksight.schemas.envelope import Envelope
from ranksight.schemas.subjects import RAS_LEASE_BUCKET, Subjects

if TYPE_CHECKING:
    from ranksight.aggregator.settings import AggregatorView

log = logging.getLogger(__name__)
OOM_RETRY_S = 0.5
# while ingest waits for the straggler engine: how often it also checks for a stop
ANALYSIS_WAIT_CHECK_S = 0.5
# how long a stop waits for a tick under way (its alert writes and announcements) before cancelling it
TICK_FINISH_S = 10.0


@dataclass
class IngestStats:
    messages: int = 0
    records: int = 0
    batches: int = 0
    duplicates: int = 0
    dead_letters: int = 0
    new_gaps: int = 0
    conflicts: int = 0  # same incarnation and seq with different content (dead-lettered)
    state_skipped: int = 0  # committed messages live state could not use (counted, never fatal)
    last_batch_size: int = 0
    last_commit_s: float = 0.0
    lag_s: float = 0.0
    pending: int = 0  # messages the stream held beyond the last batch, when it was fetched
    analysis_wait_s: float = 0.0  # time fetching waited for the straggler engine to take its queue
    last_batch_at: float = 0.0  # time.time() of the last commit

    def behind_s(self, now: float) -> float:
        """How far ingest is behind the stream now: the last batch's age while messages wait, else nothing."""
        return self.lag_s + max(0.0, now - self.last_batch_at) if self.pending else 0.0


class IngestGc:
    """The cyclic GC as ingest wants it. A batch of messages decodes into some 200,000 container objects at 1024 nodes
    (every summary's per-slice lists, records, their columns), alive until the batch is committed and observed, then
    freed by reference counting. Left to its thresholds, the GC ran in the middle of batches and traversed them: about
    two young collections a second of 20 ms each at 1024 nodes (``benchmarks/scale.py``), a twentieth of the
    aggregator's process. So what startup built is frozen, an automatic young collection is left as a backstop
    (``BACKSTOP_OBJECTS``), and ingest collects between batches (:meth:`between_batches`): the young generation, and
    the older ones every ``OLDER_EVERY`` of those, as Python's default thresholds would. A batch's objects can outlive
    it a little (the next wake-up of a task holds its commit's result): while more than ``YOUNG_MAX`` young objects
    are about, the collection waits for the next batch, at most ``MAX_WAITS`` times in a row."""

    BACKSTOP_OBJECTS = 1_000_000  # young objects that make a collection anyway (other work piling garbage up)
    OLDER_EVERY = (50, 100)  # young collections per middle one, middle ones per full one (Python's defaults)
    YOUNG_MAX = 20_000
    MAX_WAITS = 20

    def __init__(self) -> None:
        self.collections = self.waits = 0

    def start(self) -> None:
        gc.freeze()
        gc.set_threshold(self.BACKSTOP_OBJECTS, *self.OLDER_EVERY)

    def between_batches(self) -> None:
        if gc.get_count()[0] > self.YOUNG_MAX and self.waits < self.MAX_WAITS:
            self.waits += 1
            return
        self.collections, self.waits = self.collections + 1, 0
        middle, full = self.OLDER_EVERY
        gc.collect(
            2 if self.collections % (middle * full) == 0 else 1 if self.collections % middle == 0 else 0
        )


async def ensure_stream(js: JetStreamContext, settings: AggregatorView) -> None:
    cfg = settings.aggregator
    subjects = Subjects(settings.subject_prefix)
    partitions = cfg.shards.partitions
    stream = StreamConfig(
        name=cfg.stream,
        subjects=[subjects.events_filter()],
        # sharded: NATS itself hashes each event's (cluster, node) into a partition of the stored subject
        subject_transform=SubjectTransform(*subjects.partition_transform(partitions)) if partitions else None,
        storage=StorageType.FILE,
        max_age=cfg.stream_max_age_s,
        max_bytes=cfg.stream_max_bytes,
        duplicate_window=cfg.duplicate_window_s,
        num_replicas=settings.nats.jetstream_replicas,
    )

    async def create_or_update() -> None:
        try:
            await js.stream_info(cfg.stream)
            await js.update_stream(stream)
        except nats.js.errors.NotFoundError:
            await js.add_stream(stream)

    await once_jetstream_answers(
        create_or_update, f"stream {cfg.stream}", settings.nats.jetstream_ready_timeout_s
    )


async def ensure_buckets(js: JetStreamContext, settings: AggregatorView) -> None:
    """The KV buckets agents use but may not create (deploy/nats/nats-server.conf): the RAS status-poll lease bucket,
    its TTL the agents' lease time, its size bounded."""
    ras = settings.agent.collectors.ras
    await once_jetstream_answers(
        lambda: key_value(
            js,
            RAS_LEASE_BUCKET,
            ttl=ras.lease_ttl_s or 3 * ras.interval_s,
            replicas=settings.nats.jetstream_replicas,
            max_bytes=ras.lease_bucket_max_bytes,
            max_value_size=LEASE_VALUE_BYTES,
        ),
        f"KV bucket {RAS_LEASE_BUCKET}",
        settings.nats.jetstream_ready_timeout_s,
    )


async def ensure_consumer(
    js: JetStreamContext, stream: str, consumer: ConsumerConfig, timeout_s: float
) -> None:
    """The durable consumer ingest reads, made unless it exists. A server lost or a stream leader still being elected
    leaves the consumer API silent for a while (seconds on a loaded cluster): that is waited out, not fatal to ingest."""
    durable = consumer.durable_name
    assert durable is not None

    async def find_or_add() -> None:
        try:
            await js.consumer_info(stream, durable)
        except nats.js.errors.NotFoundError:
            await js.add_consumer(stream, consumer)

    await once_jetstream_answers(find_or_add, f"consumer {durable}", timeout_s)


async def _until_stopped(stop: asyncio.Event, tasks: list[asyncio.Task[None]]) -> None:
    """Wait for ``stop``; re-raise the first task that fails. A task that returns (a part disabled by its ``enabled``
    setting, e.g. the probe planner) leaves the others running."""
    stopping = asyncio.create_task(stop.wait())
    pending: set[asyncio.Task[Any]] = {*tasks, stopping}
    try:
        while not stop.is_set():
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if task is not stopping and task.exception():
                    raise task.exception()  # type: ignore[misc]
    finally:
        stopping.cancel()


class Aggregator:
    def __init__(self, settings: AggregatorView, rules: list[Rule] | None = None) -> None:
        check_rule_names(settings)
        self.settings = settings
        self.subjects = Subjects(settings.subject_prefix)
        self.version = ranksight_version()
        self.store = Store(settings.db_path(), self.subjects, settings.aggregator.ingest)
        self.state = self.new_state()
        self.actions = ActionDesk(
            settings.aggregator.actions, self.store, self._claim_action, self._ask_agent, self._share_actions
        )
        self.rules = rules if rules is not None else every_rule(settings, self.actions.planner)
        self.engine = AlertEngine(settings=settings.aggregator.alerts)
        self.sandbox = SqlSandbox(self.store, settings.aggregator.query)
        self.front = QueryFront(self)
        self.stats = IngestStats()
        self.http = HttpFace(self)
        self.raw_evidence = RawEvidence(settings.aggregator.raw_evidence)
        self.profiling = ProfileOnDemand(settings.aggregator.profile_on_demand)
        self.hang_forensics = HangForensics(settings.aggregator.hang_forensics)
        self._report_tasks: set[asyncio.Task[None]] = set()  # reports being written at job ends
        self.alertmanager = AlertmanagerPush(settings.aggregator.alerts.alertmanager, lambda: self.http.url)
        self.nc: Client | None = None
        self.lead: AnalysisLead | None = None  # sharded: this shard's candidacy for the analysis lead
        self.ready = asyncio.Event()
        self.started_ns = time.time_ns()
        self.shards: ShardOwner | None = None  # sharded: the partitions this aggregator holds
        self._stopping = asyncio.Event()
        self.gc = IngestGc()
        self.nats_problems = NatsProblems()

    def new_state(self) -> LiveState:
        cfg = self.settings.aggregator
        state = LiveState(cfg.node_gone_after_s, cfg.ingest.node_forget_after_s, cfg.hardware)
        state.stragglers.configure(cfg.stragglers, background=True)
        state.forensics.configure(cfg.hang_forensics)
        return state

    @property
    def analysis_state(self) -> LiveState | None:
        """The live state rules and cluster-wide analysis (stragglers, hangs, links, probe planning) read: this
        aggregator's; sharded, the analysis lead's cluster-wide one, and None on a shard that does not lead now."""
        if self.lead is None:
            return self.state
        return self.lead.state if self.lead.ready() else None

    def problems(self) -> list[str]:
        """What keeps this aggregator from doing its job now, each line naming its cause (a refused subject, a
        partition nobody ingests): ``status`` reports them as errors, never as a silent timeout."""
        found = self.nats_problems.lines()
        if self.shards is not None:
            found += self.shards.problems()
        return found

    def status_meta(self) -> dict[str, Any]:
        problems = self.problems()
        return {
            "health": "error" if problems else "ok",
            "problems": problems,
            "cluster": self.settings.cluster,
            "version": self.version,
            "started_ns": self.started_ns,
            "ingest": self.stats.__dict__,
            "sequence": self.store.sequence_stats(),
            "alerts_firing": len(self.engine.active),
            "rule_errors": dict(self.engine.rule_errors),
            "raw_evidence": self.raw_evidence.stats.__dict__,
            "profile_on_demand": {**self.profiling.stats.__dict__, "active": len(self.profiling.active)},
            "hang_forensics": self.hang_forensics.stats.__dict__,
            "stragglers": {
                "queued": self.state.stragglers.queued,
                "dropped": self.state.stragglers.dropped,
                "engine_restarts": self.state.stragglers.engine_restarts,
                "ahead": sum(c.ahead for c in self.state.stragglers.clusters.values()),
                "foreign": self.state.stragglers.foreign,
                "untracked": self.state.stragglers.untracked,
            },
        } | self._shard_meta()

    def _shard_meta(self) -> dict[str, Any]:
        if self.shards is None:
            return {}
        return {"shard": {"id": self.shards.shard_id, "partitions": self.shards.ingesting,
                          "members": self.shards.members},
                "analysis_lead": self.lead.status() if self.lead is not None else None}  # fmt: skip

    def _lead_changed(self, leading: bool) -> None:
        if self.shards is not None:
            self.shards.lead = leading  # published in this shard's member key

    async def run(self, stop: asyncio.Event) -> None:
        await self.store.call(self.store.open)
        try:
            await self.sandbox.open()
            await self._rebuild()
            self.gc.start()
            nc = self.nc = await connect(self.settings.nats, "ranksight-aggregator", self.nats_problems)
            js = nc.jetstream()
            await ensure_stream(js, self.settings)
            await ensure_buckets(js, self.settings)
            if self.settings.aggregator.shards.partitions:
                self.lead = AnalysisLead(self, js, on_change=self._lead_changed)
            services = await start_services(nc, self)
            await self.http.start()
            tasks = [
                asyncio.create_task(self._ingest(js), name="ingest"),
                asyncio.create_task(self._tick_loop(), name="tick"),
                asyncio.create_task(
                    retention_loop(
                        self.store,
                        self.settings.aggregator.retention_days,
                        self.settings.aggregator.query.retention_interval_s,
                        {"dead_letters": self.settings.aggregator.ingest.dead_letter_retention_days},
                    ),
                    name="retention",
                ),
                asyncio.create_task(self._forget_loop(), name="forget"),
                asyncio.create_task(
                    ProbePlanner(self.settings.aggregator.probes).run(self), name="probe-planner"
                ),
                asyncio.create_task(
                    self.alertmanager.run(
                        lambda: list(self.engine.active.values()), lambda: list(self.engine.silences.values())
                    ),
                    name="alertmanager",
                ),
                asyncio.create_task(self.actions.runner.run(), name="actions"),
            ]
            if self.lead is not None:
                tasks.append(asyncio.create_task(self.lead.run(), name="analysis-lead"))
            shards = self.settings.aggregator.shards
            if shards.export_dir is not None:
                export = shard_export_loop(self.sandbox, shards.export_dir, shards.name(),
                                           shards.export_interval_s, self.settings.aggregator.retention_days)  # fmt: skip
                tasks.append(asyncio.create_task(export, name="shard-export"))
            log.info("aggregator ready: db %s, stream %s", self.store.path, self.settings.aggregator.stream)
            self.ready.set()
            try:
                await _until_stopped(stop, tasks)
            finally:
                self._stopping.set()
                # a tick begun is finished, so what it fired is stored and announced; none begins once stopping has
                await asyncio.wait(tasks[1:2], timeout=TICK_FINISH_S)
                await cancel_all(tasks[1:])
                if self.lead is not None:
                    await self.lead.stop()  # the next lead need not wait for the lease to expire
                await self.raw_evidence.stop()
                await self.profiling.stop(self)
                await self.hang_forensics.stop()
                await asyncio.wait(tasks[:1], timeout=5)  # ingest: let the current batch commit and be acked
                await cancel_all(tasks[:1])
                for service in services:
                    with contextlib.suppress(Exception):
                        await service.stop()
                await self.http.stop()
                with contextlib.suppress(Exception):
                    await nc.flush(
                        timeout=2
                    )  # acks and alerts out; drain would wait on the pull subscription
                await disconnect(nc, timeout=2)
        finally:
            self.state.stragglers.close()  # the engine process, if one started
            gc.unfreeze()  # give what startup froze back to the collector, so it is freed at exit
            await self.sandbox.close()
            await self.store.call(self.store.close_connection)
            self.store.shutdown()

    async def _rebuild(self) -> None:
        """Replay recent history into live state; reload active alerts so nothing already firing fires again."""
        now = time.time_ns()
        since = now - int(self.settings.aggregator.replay_window_s * NS)
        log.info(
            "replaying the last %.0f s of history into live state", self.settings.aggregator.replay_window_s
        )
        replayed = await self.store.call(self.store.replay, self.state.kinds, since)
        for env, recv_ns in replayed:
            self._observe(env, recv_ns)
        self.state.tick(now)
        # sharded, the firing alerts are the analysis lead's, kept in its KV bucket: what this shard's history says
        # fired (when it led) is not announced again from here
        sharded = self.settings.aggregator.shards.partitions > 0
        active = [] if sharded else await self.store.call(self.store.active_alerts)
        self.engine = AlertEngine(active, self.settings.aggregator.alerts)
        drained = await self.store.call(self.store.drained_nodes)
        self.engine.drained = {(d["cluster"], d["node"]) for d in drained}
        self.engine.silences = {s.id: s for s in await self.store.call(self.store.silences, now)}
        await self.actions.load(self.engine.active.values())
        log.info("rebuilt live state from %d stored messages (%d skipped); %d alerts firing", len(replayed),
                 self.store.replay_skipped, len(self.engine.active))  # fmt: skip

    def _observe(self, env: Envelope, recv_ns: int) -> None:
        """Feed live state; a message it cannot use is counted and skipped, never fatal to ingest or startup."""
        try:
            self.state.observe(env, recv_ns)
        except Exception:
            self.stats.state_skipped += 1
            log.exception("live state could not use %s message %s; skipped", env.kind, env.msg_id)

    async def _ingest(self, js: JetStreamContext) -> None:
        cfg = self.settings.aggregator
        if not cfg.shards.partitions:
            await self._consume(js, cfg.durable, None, self._stopping, None)
            return
        self.shards = ShardOwner(js, self.settings, partial(self._consume_partition, js), self.state.forget)
        await self.shards.run(self._stopping)

    async def _consume_partition(
        self, js: JetStreamContext, partition: int, stop: asyncio.Event, nodes: set[NodeKey]
    ) -> None:
        durable = f"{self.settings.aggregator.durable}-p{partition}"
        await self._consume(js, durable, self.subjects.partition_filter(partition), stop, nodes)

    async def _consume(
        self,
        js: JetStreamContext,
        durable: str,
        filter_subject: str | None,
        stop: asyncio.Event,
        nodes: set[NodeKey] | None,
    ) -> None:
        """Ingest from the durable consumer until ``stop`` (or the aggregator's stop): the batch in hand is committed
        and acknowledged first. ``nodes`` collects the nodes seen (a partition's, forgotten when it goes)."""
        cfg = self.settings.aggregator
        consumer = ConsumerConfig(
            durable_name=durable,
            filter_subject=filter_subject,
            ack_policy=AckPolicy.EXPLICIT,
            deliver_policy=DeliverPolicy.ALL,
            ack_wait=cfg.ack_wait_s,
            max_ack_pending=max(cfg.fetch_batch * 4, 1000),
            max_deliver=-1,
        )
        await ensure_consumer(js, cfg.stream, consumer, self.settings.nats.jetstream_ready_timeout_s)
        assert self.nc is not None
        pull = await BoundedPull(
            self.nc, cfg.stream, durable, cfg.fetch_batch, cfg.ingest.fetch_max_bytes
        ).start()
        try:
            await self._pull_until(pull, stop, nodes)
        finally:
            await pull.stop()

    async def _pull_until(self, pull: BoundedPull, stop: asyncio.Event, nodes: set[NodeKey] | None) -> None:
        # A flag, not only cancellation: on Python 3.11 asyncio.wait_for (inside nats-py) can swallow a cancel.
        pace_s = self.settings.aggregator.ingest.commit_every_s
        next_fetch = 0.0
        while not (stop.is_set() or self._stopping.is_set()):
            await self._wait_for_analysis(stop)
            await self._until(next_fetch, stop)
            try:
                msgs = await pull.fetch(timeout=1.0)
            except (nats.errors.ConnectionClosedError, nats.errors.ConnectionReconnectingError,
                    nats.errors.OutboundBufferLimitError) as exc:  # fmt: skip
                log.warning("fetch failed (%s); retrying", exc)
                await asyncio.sleep(0.5)
                continue
            if msgs:
                # caught up (nothing waits behind this fetch): the next commit gathers what comes until then; a
                # backlog, whatever bounded the fetch (messages, bytes), is read on at once
                caught_up = not msgs[-1].metadata.num_pending
                next_fetch = time.monotonic() + pace_s if caught_up else 0.0
                await self._take(msgs, nodes)
                del msgs
            self.gc.between_batches()  # the batch's objects are gone

    async def _take(self, msgs: list[Msg], nodes: set[NodeKey] | None) -> None:
        """Commit, acknowledge and observe a fetched batch."""
        recv_ns = time.time_ns() // 1000 * 1000  # stored at microsecond precision: replay must agree exactly
        batch = [Incoming(m.subject, m.data, recv_ns, (m.headers or {}).get("Nats-Msg-Id")) for m in msgs]
        while batch:  # more than one commit when the batch holds more than fetch_max_records records
            started = time.monotonic()
            result = await self._commit(batch)
            commit_s = time.monotonic() - started
            done, msgs, batch = msgs[: result.taken], msgs[result.taken :], batch[result.taken :]
            for m in done:  # only after the commit: a crash before this line redelivers, harmlessly
                await m.ack()
            self._account(result, len(done), commit_s, done[-1].metadata)
            for env, recv in result.accepted:
                self._observe(env, recv)
            if nodes is not None:
                nodes.update((env.cluster, env.node) for env, _ in result.accepted)

    async def _until(self, monotonic_s: float, stop: asyncio.Event) -> None:
        """Wait until ``monotonic_s``, or the stop of this ingest or of the aggregator."""
        remaining = monotonic_s - time.monotonic()
        if remaining <= 0:
            return
        stops = [asyncio.ensure_future(event.wait()) for event in (stop, self._stopping)]
        try:
            await asyncio.wait(stops, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in stops:
                waiter.cancel()

    async def _wait_for_analysis(self, stop: asyncio.Event) -> None:
        """Fetch nothing while the straggler engine's queue is at ``ingest_waits_at_records``: the stream keeps the
        backlog (within its limits), the aggregator's memory stays bounded, and the engine sees every record."""
        tracker = self.state.stragglers
        if not tracker.backlogged:
            return
        started = time.monotonic()
        while tracker.backlogged and not (stop.is_set() or self._stopping.is_set()):
            tracker.taken.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(tracker.taken.wait(), ANALYSIS_WAIT_CHECK_S)
        self.stats.analysis_wait_s += time.monotonic() - started

    async def _commit(self, batch: list[Incoming]) -> BatchResult:
        """Commit ``batch``, waiting out memory that SQL queries hold: DuckDB has one memory pool for readers and the
        writer, and a query at the limit must delay ingest, not stop it (the batch stays unacknowledged meanwhile)."""
        while True:
            try:
                return await self.store.call(self.store.commit_batch, batch)
            except duckdb.Error as exc:
                oom = out_of_memory(exc)
                if oom is None or self._stopping.is_set():
                    raise
                log.warning("commit waits for memory held by SQL queries (aggregator.query.*memory_limit_bytes): %s",
                            str(oom).splitlines()[0])  # fmt: skip
                await asyncio.sleep(OOM_RETRY_S)

    def _account(self, result: BatchResult, n: int, commit_s: float, last: Any) -> None:
        s = self.stats
        s.messages += n
        s.records += result.records
        s.batches += 1
        s.duplicates += result.duplicates
        s.dead_letters += result.dead_letters
        s.new_gaps += result.new_gaps
        s.conflicts += result.conflicts
        s.last_batch_size, s.last_commit_s = n, commit_s
        s.last_batch_at = time.time()
        if last.timestamp is not None:
            s.lag_s = max(0.0, s.last_batch_at - last.timestamp.timestamp())
        s.pending = last.num_pending or 0

    async def _forget_loop(self) -> None:
        """Now and then, drop the sequence state of nodes silent longer than ``node_forget_after_s``."""
        forget_after_s = self.settings.aggregator.ingest.node_forget_after_s
        while True:
            await asyncio.sleep(min(60.0, forget_after_s / 10))
            forgotten = await self.store.call(self.store.forget_idle, time.time_ns())
            if forgotten:
                log.info("forgot the sequence state of %d nodes silent for %.0f s", forgotten, forget_after_s)

    async def _tick_loop(self) -> None:
        while not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), self.settings.aggregator.tick_s)
                return
            await self.tick(time.time_ns())

    async def tick(self, now_ns: int) -> list[Alert]:
        self.state.tick(now_ns)
        state = self.analysis_state
        if state is None:  # sharded, not the analysis lead (or its feed still catching up): no rule runs here
            self.http.events.tick(self.state, [])
            return []
        if self.lead is None:
            behind_s = self.stats.behind_s(now_ns / 1e9)
        else:
            state.tick(now_ns)
            behind_s = self.lead.behind_s()
        transitions = self.engine.evaluate(self.rules, state, now_ns, ingest_behind_s=behind_s)
        if self.lead is not None:  # before anything is announced: a new lead must know what fired
            await self.lead.save(now_ns)
        self.actions.tick(self.engine, cluster_sizes(state), transitions, now_ns)  # hands over, never waits
        self.http.events.tick(self.state, transitions)
        findings = state.stragglers.take_history()
        if findings:
            try:
                await self.store.call(self.store.append_rows, "straggler_finding_history", findings)
            except duckdb.Error:  # a field without its column (a forgotten migration) must not stop ticks
                log.exception("%d straggler findings not stored", len(findings))
        if transitions:
            await self.store.call(self.store.write_alerts, transitions)
            await self._publish_alerts(transitions)
            self.alertmanager.transitions(transitions)
            self.raw_evidence.submit(self, transitions)  # after the write: its evidence update comes later
            self.profiling.submit(self, transitions)
            self.hang_forensics.submit(
                self, transitions
            )  # its report raises flight_recorder_hang on a later tick
            self._reports_at_job_end(transitions)
        return transitions

    def _reports_at_job_end(self, transitions: list[Alert]) -> None:
        """Each job that just ended gets its report written to ``<state_dir>/reports``, off the tick."""
        if not self.settings.aggregator.report.on_job_end:
            return
        for alert in transitions:
            if alert.rule == "job_ended" and alert.state == "firing" and alert.job:
                task = asyncio.create_task(self._write_report(alert.cluster, alert.job))
                self._report_tasks.add(task)
                task.add_done_callback(self._report_tasks.discard)

    async def _write_report(self, cluster: str, job: str) -> None:
        cfg = self.settings.aggregator
        try:
            text = await job_report(self.sandbox, cfg.report, job, cluster, cfg.query.sql_time_limit_s)
            path = await asyncio.to_thread(write_report, self.settings.state_dir / "reports", job, text,
                                           cfg.report.max_reports)  # fmt: skip
        except (JobNotFound, SqlError, OSError) as exc:
            log.warning("report of job %s not written: %s", job, exc)
            return
        log.info("report of job %s: %s", job, path)

    async def _claim_action(self, action: Action) -> bool:
        """Sharded: whether this analysis lead may run ``action`` (no lead before it did); unsharded, always."""
        if self.lead is None:
            return True
        return await self.lead.book.claim_action(action.id, self.settings.aggregator.shards.name())

    async def _share_actions(self, actions: list[Action]) -> None:
        """Sharded: where each action stands, in the alert KV bucket, for the next analysis lead."""
        if self.lead is not None:
            for action in actions:
                await self.lead.book.put_action(action)

    async def _ask_agent(self, cluster: str, node: str, command: str, body: dict[str, Any]) -> dict[str, Any]:
        """One request to a node agent's command (an action's): its JSON answer; :class:`ActionFailed` when no agent
        answers, :class:`ActionRefused` when it refuses."""
        if self.nc is None:
            raise ActionFailed("not connected to NATS yet")
        timeout_s = self.settings.aggregator.actions.timeout_s
        try:
            msg = await self.nc.request(self.subjects.agent(cluster, node, command), json.dumps(body).encode(),
                                        timeout=timeout_s)  # fmt: skip
        except nats.errors.NoRespondersError:
            raise ActionFailed(f"no agent of {node} answers (down, or its app collector is off)") from None
        except nats.errors.TimeoutError:
            raise ActionFailed(f"the agent of {node} did not answer within {timeout_s:g} s") from None
        refused = (msg.headers or {}).get("Nats-Service-Error")
        if refused:
            raise ActionRefused(f"the agent of {node} refused: {refused}")
        answer = json.loads(msg.data)
        if not isinstance(answer, dict):
            raise ActionFailed(f"the agent of {node} answered {type(answer).__name__}, not an object")
        return answer

    async def _publish_alerts(self, alerts: list[Alert]) -> None:
        if self.nc is None:
            return
        for alert in alerts:
            if alert.silenced_by:
                continue  # a maintenance window: stored and shown, not announced
            subject = self.subjects.alert(alert.cluster, alert.severity, alert.rule)
            await self.nc.publish(subject, json.dumps(alert.model_dump()).encode())
