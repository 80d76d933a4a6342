"""The analysis lead of sharded aggregators (design §9, docs/scaling.md).

With ``aggregator.shards.partitions > 0`` each shard ingests only its partitions, but stragglers, hangs and link
localization need every node of a job. So one shard at a time, the holder of the ``lead`` key of the shards' KV bucket,
is the analysis lead: every shard tries ``KvLeases.hold("lead")`` each ``lease_ttl_s / 3``; the holder

- loads the alert engine's state (:class:`AlertBook`: firing alerts, pending hold-downs, when a firing alert's condition
  was last seen) from the alert KV bucket, so nothing that fires already fires again and nothing resolves early;
- reads every partition's events of the kinds live state uses, except the raw ``inspector`` kind (:class:`LeadFeed`:
  an ephemeral consumer starting ``replay_window_s`` ago, the same window an unsharded aggregator replays from its
  DuckDB at start), into its own cluster-wide :class:`LiveState`;
- evaluates the rules once that feed has caught up with the stream, and writes each evaluation's engine changes to the
  bucket before it publishes the transitions.

A renewal that fails, or no successful renewal for ``lease_ttl_s``, ends the lead at once: no rule is evaluated from
then on. Silences and drains are kept in the same bucket by whichever shard's API received them, and every shard
watches them, so the lead (this one or the next) applies them.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import json
import logging
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import nats.errors
import nats.js.errors
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.kv import KV_DEL, KV_PURGE, KeyValue

from ranksight.aggregator.actions.model import Action
from ranksight.aggregator.alerts import AlertEngine
from ranksight.aggregator.api.alerting import drain_known, silence_known
from ranksight.aggregator.ingest.admission import admit
from ranksight.aggregator.pull import BoundedPull
from ranksight.aggregator.state import NS, LiveState
from ranksight.aggregator.timefmt import ns_of
from ranksight.core.aio import cancel_all
from ranksight.core.kvlease import NATS_ERRORS, KvLeases, key_value
from ranksight.schemas.alerts import Alert, Silence
from ranksight.schemas.codec import DecodeError, decode_event

if TYPE_CHECKING:
    from ranksight.aggregator.runtime import Aggregator

log = logging.getLogger(__name__)
LEAD_KEY = "lead"
FIRING, PENDING, SILENCE, DRAIN = "firing.", "pending.", "silence.", "drain."
CLAIM, ACTION = "claim.", "action."
PURGE_EVERY_ROUNDS = 100  # the lead removes ended silences from the bucket every this many lease rounds
YIELD_EVERY_S = 0.02  # the feed lets the event loop run (leases, ingest, queries) at least this often


def drain_key(cluster: str, node: str) -> str:
    """A KV key for any (cluster, node) pair: node names need not be key tokens."""
    return DRAIN + base64.urlsafe_b64encode(f"{cluster}\x1f{node}".encode()).decode().rstrip("=")


class AlertBook:
    """The alert engine's state in a JetStream KV bucket without TTL (replicas ``nats.jetstream_replicas``).

    Keys: ``firing.<fp>`` (the alert, and since when its condition is absent while it clears), ``pending.<fp>`` (when a
    condition not yet past its hold-down was first seen), ``silence.<id>``, ``drain.<cluster/node>``, ``claim.<id>``
    (an action some lead ran: :meth:`claim_action`) and ``action.<id>`` (where each action stands, for the next lead's
    circuit breaker and cooldowns). The lead writes only what changed since its last write."""

    def __init__(self, js: JetStreamContext, bucket: str, max_bytes: int, replicas: int) -> None:
        self.js, self.bucket, self.max_bytes, self.replicas = js, bucket, max_bytes, replicas
        self._kv: KeyValue | None = None
        # firing/pending keys as the bucket holds them (written or loaded): key -> what the value was made of
        self.written: dict[str, tuple[Any, ...]] = {}

    async def kv(self) -> KeyValue:
        if self._kv is None:
            self._kv = await key_value(self.js, self.bucket, replicas=self.replicas, max_bytes=self.max_bytes)
        return self._kv

    @staticmethod
    def engine_keys(engine: AlertEngine, now_ns: int) -> dict[str, tuple[Any, ...]]:
        """What the bucket must hold for ``engine`` after an evaluation at ``now_ns`` (values not yet encoded: the
        same alert object and times mean the same value)."""
        out: dict[str, tuple[Any, ...]] = {}
        for fp, alert in engine.active.items():
            last = engine.last_seen.get(fp)
            out[FIRING + fp] = (alert, last if last is not None and last != now_ns else None)  # absent since
        for fp, first in engine.pending.items():
            out[PENDING + fp] = (first,)
        return out

    @staticmethod
    def encode(key: str, made_of: tuple[Any, ...]) -> bytes:
        if key.startswith(FIRING):
            alert, clearing = made_of
            doc = {"alert": alert.model_dump(mode="json"), "clearing_since_ns": clearing}
        else:
            doc = {"since_ns": made_of[0]}
        return json.dumps(doc, default=str).encode()

    async def save(self, engine: AlertEngine, now_ns: int) -> int:
        """Write the engine's changes since the last save; how many keys changed. What a failure leaves unwritten is
        written by the next save."""
        kv = await self.kv()
        wanted = self.engine_keys(engine, now_ns)
        changed = 0
        for key, made_of in wanted.items():
            old = self.written.get(key)
            if old is None or old[0] is not made_of[0] or old[1:] != made_of[1:]:
                await kv.put(key, self.encode(key, made_of))
                self.written[key] = made_of
                changed += 1
        for key in [k for k in self.written if k not in wanted]:
            await kv.delete(key)
            del self.written[key]
            changed += 1
        return changed

    async def snapshot(self, *prefixes: str) -> dict[str, bytes]:
        """The keys under ``prefixes`` and their values now.

        The keys come from the bucket's stream (its subjects under each prefix), not from a watch: nats-py's watch
        reports "nothing more" as soon as the server has pushed everything, which under load can be before a single
        entry was handed over, and the snapshot would come back empty."""
        kv = await self.kv()
        stream, subject_prefix = f"KV_{self.bucket}", f"$KV.{self.bucket}."
        entries: dict[str, bytes] = {}
        for prefix in prefixes:
            info = await self.js.stream_info(stream, subjects_filter=subject_prefix + prefix + ">")
            for subject in info.state.subjects or {}:
                try:
                    entry = await kv.get(subject[len(subject_prefix) :])
                except nats.js.errors.NotFoundError:
                    continue  # deleted or purged (its marker is still a subject), or gone since the listing
                entries[entry.key] = entry.value or b""
        return entries

    async def purge_ended_silences(self, now_ns: int) -> int:
        """Remove the silences that have ended (their history stays in the shards' DuckDB); how many."""
        kv = await self.kv()
        purged = 0
        for key, value in (await self.snapshot(SILENCE)).items():
            with contextlib.suppress(ValueError):
                if ns_of(Silence.model_validate_json(value).ends_at) > now_ns:
                    continue
            await kv.purge(key)  # ended, or unreadable
            purged += 1
        return purged

    async def load(self, engine: AlertEngine) -> None:
        """Fill ``engine`` with the firing and pending alerts the last lead left."""
        for key, value in (await self.snapshot(FIRING, PENDING)).items():
            try:
                doc = json.loads(value)
                if key.startswith(FIRING):
                    alert = Alert.model_validate(doc["alert"])
                    engine.active[alert.fingerprint] = alert
                    if doc.get("clearing_since_ns") is not None:
                        engine.last_seen[alert.fingerprint] = int(doc["clearing_since_ns"])
                else:
                    engine.pending[key[len(PENDING) :]] = int(doc["since_ns"])
            except (ValueError, KeyError, TypeError) as exc:  # one bad key must not stop the lead
                log.warning("alert state %s unusable (%s); skipped", key, exc)
        self.written = self.engine_keys(engine, -1)  # what the bucket holds now (-1: no condition seen yet)

    async def claim_action(self, action_id: str, owner: str) -> bool:
        """Claim an action for ``owner`` (a shard id): True for the first owner to ask over every lead there ever is
        (a KV create fails when the key exists), and again for that owner (a restart that finishes what it began),
        so a new lead never runs what an earlier one ran."""
        kv = await self.kv()
        try:
            await kv.create(CLAIM + action_id, json.dumps({"owner": owner, "at_ns": time.time_ns()}).encode())
        except nats.js.errors.KeyWrongLastSequenceError:
            entry = await kv.get(CLAIM + action_id)
            try:
                return bool(json.loads(entry.value or b"{}").get("owner") == owner)
            except ValueError:
                return False
        return True

    async def put_action(self, action: Action) -> None:
        await (await self.kv()).put(ACTION + action.id, action.to_json())

    async def actions(self) -> list[Action]:
        """Where every action the leads decided stands (an unreadable key is skipped and logged)."""
        found = []
        for key, value in (await self.snapshot(ACTION)).items():
            try:
                found.append(Action.from_json(value))
            except (ValueError, TypeError) as exc:
                log.warning("action state %s unusable (%s); skipped", key, exc)
        return found

    async def purge_old_actions(self, before_ns: int) -> int:
        """Remove the claims and states of actions last moved before ``before_ns`` (history keeps them); how many."""
        kv = await self.kv()
        purged = 0
        for key, value in (await self.snapshot(ACTION, CLAIM)).items():
            try:
                at_ns = (
                    int(json.loads(value)["at_ns"])
                    if key.startswith(CLAIM)
                    else Action.from_json(value).at_ns
                )
            except (ValueError, TypeError, KeyError):
                at_ns = 0  # unreadable: nothing can use it
            if at_ns < before_ns:
                await kv.purge(key)
                purged += 1
        return purged

    async def put_silence(self, silence: Silence) -> None:
        kv = await self.kv()
        await kv.put(SILENCE + silence.id, silence.model_dump_json().encode())

    async def put_drains(self, cluster: str, nodes: list[str], drained: bool, reason: str) -> None:
        kv = await self.kv()
        for node in nodes:
            key = drain_key(cluster, node)
            if drained:
                await kv.put(key, json.dumps({"cluster": cluster, "node": node, "reason": reason}).encode())
            else:
                await kv.delete(key)


class LeadFeed:
    """The lead's reading of every partition: an ephemeral consumer (acknowledging nothing) filtered on the kinds live
    state uses, less raw ``inspector``, from ``replay_window_s`` ago; should a lost NATS server take the consumer
    with it, a new one resumes after the last stream sequence read. Receipt time is the stream's timestamp, so any
    lead rebuilds the same state from the same messages."""

    def __init__(self, agg: Aggregator, js: JetStreamContext, state: LiveState, shard_id: str) -> None:
        self.agg, self.js, self.state = agg, js, state
        cfg = agg.settings.aggregator
        self.stream = cfg.stream
        self.prefix = f"{cfg.durable}-lead-{shard_id}"
        self.name = ""  # the consumer's, new at each creation
        kinds = sorted(state.kinds - {"inspector"})
        self.filters = [agg.subjects.stored_kind_filter(k, partitioned=True) for k in kinds]
        self.inactive_s = max(2 * cfg.shards.lease_ttl_s, 5.0)  # a dead lead's consumer goes by itself
        self.last_seq = 0
        self.caught_up = asyncio.Event()
        self.messages = 0
        self.skipped = 0
        self.lag_s = 0.0
        self.pending = 0
        self.replay_until = 0  # the stream's last sequence when the feed began: caught up once read that far
        self.unanswered_since: float | None = None  # time.monotonic() since the consumer does not answer
        self.recreated = 0  # consumers made again after a loss

    def behind_s(self) -> float:
        return self.lag_s if self.pending else 0.0

    async def _create(self) -> None:
        cfg = self.agg.settings.aggregator
        start: dict[str, Any]
        if self.last_seq:
            start = {"deliver_policy": DeliverPolicy.BY_START_SEQUENCE, "opt_start_seq": self.last_seq + 1}
        else:
            since = time.time() - cfg.replay_window_s
            start = {"deliver_policy": DeliverPolicy.BY_START_TIME,
                     "opt_start_time": datetime.datetime.fromtimestamp(since, datetime.UTC)}  # fmt: skip
        if (
            self.name
        ):  # a lost server's consumer may come back with it: not to be read twice (else it expires)
            with contextlib.suppress(*NATS_ERRORS):
                await self.js.delete_consumer(self.stream, self.name)
        name = f"{self.prefix}-{uuid.uuid4().hex[:8]}"
        await self.js.add_consumer(self.stream, ConsumerConfig(
            name=name, filter_subjects=self.filters, ack_policy=AckPolicy.NONE,
            inactive_threshold=self.inactive_s, mem_storage=True, num_replicas=1, **start,
        ))  # fmt: skip
        self.name = name
        self.unanswered_since = None

    async def run(self) -> None:
        """Read until cancelled; a consumer lost with its server is made again, resuming after the last message."""
        try:
            while True:
                pull = await self._start()
                try:
                    await self._read(pull)
                finally:
                    with contextlib.suppress(*NATS_ERRORS):
                        await pull.stop()
                self.recreated += 1
        finally:
            with contextlib.suppress(*NATS_ERRORS):
                await self.js.delete_consumer(self.stream, self.name)

    async def _start(self) -> BoundedPull:
        cfg = self.agg.settings.aggregator
        while True:
            try:
                if not self.replay_until:
                    self.replay_until = (await self.js.stream_info(self.stream)).state.last_seq or 1
                await self._create()
                break
            except NATS_ERRORS as exc:
                log.warning("analysis lead: cannot create its consumer (%s); retrying", exc)
                await asyncio.sleep(1.0)
        assert self.agg.nc is not None
        return await BoundedPull(self.agg.nc, self.stream, self.name, cfg.fetch_batch,
                                 cfg.ingest.fetch_max_bytes).start()  # fmt: skip

    async def _read(self, pull: BoundedPull) -> None:
        """Read into live state until the consumer is lost."""
        while True:
            try:
                msgs = await pull.fetch(timeout=1.0)
                if not msgs:
                    if await self._lost():
                        return
                    continue
            except NATS_ERRORS as exc:
                log.warning("analysis lead: fetch failed (%s); retrying", exc)
                await asyncio.sleep(0.5)
                continue
            yielded = time.monotonic()
            for msg in msgs:
                self._observe(msg.subject, msg.data, msg.metadata)
                if time.monotonic() - yielded > YIELD_EVERY_S:  # a replay must not starve this shard's leases
                    await asyncio.sleep(0)
                    yielded = time.monotonic()
            meta = msgs[-1].metadata
            self.pending = meta.num_pending or 0
            self.lag_s = max(0.0, time.time() - meta.timestamp.timestamp()) if meta.timestamp else 0.0
            if not self.pending or self.last_seq >= self.replay_until:
                self.caught_up.set()  # read all that the stream held when the lead began: its state is whole
            await asyncio.sleep(0)

    async def _lost(self) -> bool:
        """Nothing came: the feed is caught up if the consumer has nothing pending; True when the consumer is gone or
        has not answered for a lease time (its server lost: the consumer is in memory, on one server)."""
        try:
            info = await self.js.consumer_info(self.stream, self.name)
        except nats.js.errors.NotFoundError:
            why = "is gone"
        except NATS_ERRORS:
            now = time.monotonic()
            self.unanswered_since = self.unanswered_since or now
            if now - self.unanswered_since < self.agg.settings.aggregator.shards.lease_ttl_s:
                return False
            why = "does not answer"
        else:
            self.unanswered_since = None
            # an empty fetch alone proves nothing (an earlier request's end arriving late ends it)
            self.pending = info.num_pending or 0
            if not self.pending:
                self.caught_up.set()
            return False
        log.warning(
            "analysis lead: consumer %s %s; resuming after stream sequence %d", self.name, why, self.last_seq
        )
        return True

    def _observe(self, subject: str, data: bytes, meta: Any) -> None:
        self.last_seq = meta.sequence.stream
        recv_ns = int(meta.timestamp.timestamp() * 1e6) * 1000 if meta.timestamp else time.time_ns()
        self.messages += 1
        try:
            env = decode_event(data)
            admit(env, subject, recv_ns, self.agg.subjects, self.agg.settings.aggregator.ingest)
            self.state.observe(env, recv_ns)
        except DecodeError:
            self.skipped += 1  # the shard that ingests it dead-letters it
        except Exception:
            self.skipped += 1
            log.exception("analysis lead: live state could not use a message on %s; skipped", subject)


class AnalysisLead:
    """Every shard's candidacy for the analysis lead; while leading, its feed, state and alert book."""

    def __init__(self, agg: Aggregator, js: JetStreamContext, on_change: Callable[[bool], None] | None = None
                 ) -> None:  # fmt: skip
        self.agg, self.js = agg, js
        cfg = agg.settings.aggregator.shards
        replicas = agg.settings.nats.jetstream_replicas
        self.shard_id = cfg.name()
        self.leases = KvLeases(js, cfg.bucket, cfg.lease_ttl_s, self.shard_id, replicas)
        self.book = AlertBook(js, cfg.alerts_bucket, cfg.alerts_bucket_max_bytes, replicas)
        self.ttl_s = cfg.lease_ttl_s
        self.interval_s = cfg.lease_ttl_s / 3
        self.on_change = on_change
        self.leading = False
        self.renewed_at = 0.0  # time.monotonic() of the last successful renewal
        self.state: LiveState | None = None  # cluster-wide live state, while leading
        self.feed: LeadFeed | None = None
        self.takeovers = 0
        self.rounds = 0
        self._tasks: list[asyncio.Task[None]] = []

    def behind_s(self) -> float:
        """How far the feed of the cluster-wide state is behind the stream (seconds)."""
        return self.feed.behind_s() if self.feed is not None else 0.0

    def status(self) -> dict[str, Any]:
        feed = self.feed
        return {"shard_id": self.shard_id, "leading": self.leading, "ready": self.ready(),
                "takeovers": self.takeovers, "feed_messages": feed.messages if feed else 0,
                "feed_skipped": feed.skipped if feed else 0, "feed_recreated": feed.recreated if feed else 0, "feed_behind_s": feed.behind_s() if feed else 0.0}  # fmt: skip

    def ready(self) -> bool:
        """Whether this shard evaluates rules now: it leads, renewed within the lease time, and its feed caught up."""
        fresh = time.monotonic() - self.renewed_at < self.ttl_s
        return self.leading and fresh and self.feed is not None and self.feed.caught_up.is_set()

    async def run(self) -> None:
        watch = asyncio.create_task(self._watch_silences_and_drains(), name="lead-watch")
        try:
            while True:
                await self.round()
                await asyncio.sleep(self.interval_s)
        finally:
            await cancel_all([watch, *self._tasks])

    async def round(self) -> None:
        """Take or renew the lead; stop leading when that fails or the feed failed."""
        held: bool | None = None  # None: the bucket did not answer (a NATS server lost); ready() sees the age
        asked_at = time.monotonic()  # the bucket's TTL runs from before its answer: count from the question
        try:
            held = await self.leases.hold(LEAD_KEY)
            if held and self.rounds % PURGE_EVERY_ROUNDS == 0:
                await self.book.purge_ended_silences(time.time_ns())
                kept_ns = int(self.agg.settings.aggregator.retention_days * 86400 * NS)  # as long as history
                await self.book.purge_old_actions(time.time_ns() - kept_ns)
        except NATS_ERRORS as exc:
            log.warning("analysis lead: lease round failed (%s)", exc)
        self.rounds += 1
        if held:
            self.renewed_at = asked_at
        stale = time.monotonic() - self.renewed_at >= self.ttl_s
        if self.leading and (held is False or stale):
            await self._step_down(
                "its renewal was refused" if held is False else "no renewal for a lease time"
            )
        elif self.leading and self._tasks[0].done():
            await self._step_down(f"its feed failed: {self._tasks[0].exception()!r}")
        elif held and not self.leading:
            try:
                await self._take_over()
            except NATS_ERRORS as exc:  # the lease stays held: the next round tries again
                log.warning("analysis lead: taking over failed (%s); next round tries again", exc)

    async def _take_over(self) -> None:
        agg = self.agg
        engine = AlertEngine(settings=agg.settings.aggregator.alerts)
        await self.book.load(engine)
        known = (
            agg.actions.planner.actions
        )  # what earlier leads did counts against the breaker and cooldowns here
        for action in await self.book.actions():
            if action.id not in known or known[action.id].at_ns < action.at_ns:
                agg.actions.planner.record(action)
        self.state = agg.new_state()
        self.feed = LeadFeed(agg, self.js, self.state, self.shard_id)
        engine.drained, engine.silences = agg.engine.drained, agg.engine.silences  # kept by the watch
        agg.engine = engine
        self.leading = True
        self.takeovers += 1
        self._tasks = [asyncio.create_task(self.feed.run(), name="lead-feed")]
        log.info("shard %s is the analysis lead: %d alerts firing, %d pending; replaying %.0f s of every partition",
                 self.shard_id, len(engine.active), len(engine.pending),
                 agg.settings.aggregator.replay_window_s)  # fmt: skip
        if self.on_change:
            self.on_change(True)

    async def _step_down(self, why: str) -> None:
        """Stop leading now: no rule runs from here on; the engine left is empty (its alerts are the next lead's)."""
        self.leading = False
        log.warning("shard %s is no longer the analysis lead: %s", self.shard_id, why)
        old = self.agg.engine
        self.agg.engine = AlertEngine(settings=self.agg.settings.aggregator.alerts)
        self.agg.engine.drained, self.agg.engine.silences = old.drained, old.silences
        state, self.state, self.feed = self.state, None, None
        tasks, self._tasks = self._tasks, []
        if self.on_change:
            self.on_change(False)
        await cancel_all(tasks)
        if state is not None:
            state.stragglers.close()

    async def stop(self) -> None:
        """At shutdown: stop leading and give the lease back, so the next lead need not wait for it to expire."""
        if self.leading:
            await self._step_down("shutting down")
        with contextlib.suppress(*NATS_ERRORS):
            await self.leases.release(LEAD_KEY)

    async def save(self, now_ns: int) -> None:
        """After an evaluation: the engine's changes into the bucket (before the transitions are published). While the
        bucket cannot be written (a NATS server lost), the transitions still go out; the next save catches up."""
        try:
            await self.book.save(self.agg.engine, now_ns)
        except NATS_ERRORS as exc:
            log.warning("analysis lead: alert state not saved (%s); next tick tries again", exc)

    async def _watch_silences_and_drains(self) -> None:
        """Apply every shard's silences and drains to this shard's engine (the lead's, or the one a lead inherits)."""
        while True:
            try:
                kv = await self.book.kv()
                watchers = [await kv.watch(SILENCE + ">"), await kv.watch(DRAIN + ">")]
                try:
                    await asyncio.gather(*(self._apply(w) for w in watchers))
                finally:
                    for w in watchers:
                        with contextlib.suppress(*NATS_ERRORS):
                            await w.stop()
            except NATS_ERRORS as exc:
                log.warning("analysis lead: silence/drain watch failed (%s); watching again", exc)
                await asyncio.sleep(self.interval_s)

    async def _apply(self, watcher: KeyValue.KeyWatcher) -> None:
        agg = self.agg
        while True:
            try:
                entry = await watcher.updates(timeout=3600)
            except nats.errors.TimeoutError:
                continue
            if entry is None:
                continue  # the end of what the bucket held when the watch began
            gone = entry.operation in (KV_DEL, KV_PURGE)
            try:
                if entry.key.startswith(SILENCE):
                    if gone:
                        agg.engine.silences.pop(entry.key[len(SILENCE) :], None)
                    else:
                        await silence_known(agg, Silence.model_validate_json(entry.value or b""))
                elif gone:
                    await drain_known(agg, *_drain_of(entry.key), drained=False, reason="")
                else:
                    doc = json.loads(entry.value or b"")
                    await drain_known(agg, doc["cluster"], doc["node"], True, doc.get("reason", ""))
            except (ValueError, KeyError, TypeError) as exc:
                log.warning("analysis lead: %s unusable (%s); skipped", entry.key, exc)


def _drain_of(key: str) -> tuple[str, str]:
    token = key[len(DRAIN) :]
    cluster, node = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode().split("\x1f", 1)
    return cluster, node
