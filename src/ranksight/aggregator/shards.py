"""Sharded ingest (design §9): which partitions of the event stream this aggregator ingests, held through KV leases.

Every shard keeps ``member.<shard_id>`` fresh in the shards' KV bucket and renews its ``partition.<p>`` leases every
``lease_ttl_s / 3``; the bucket's TTL removes both when the shard dies. The partitions a shard should hold are a pure
function of the live members (:func:`assignment`), so every shard computes the same answer from the same members, and a
member joining or leaving moves few partitions. Each round a shard:

- renews what it holds; a renewal refused (someone else holds the key now), or none possible for a lease time (the
  bucket lost with a NATS server), stops that partition's ingest at once;
- releases what is no longer its own: that partition's ingest stops after the batch in hand is committed and
  acknowledged, then the lease is deleted, so the new owner takes it at its next round without waiting for expiry;
- takes its own partitions that are free, and any partition left free longer than a lease time (its owner-to-be does
  not take it), which it then keeps while the members stay the same.

Whoever holds ``partition.<p>`` consumes the durable consumer ``<aggregator.durable>-p<p>``, so a new owner resumes where
the last owner's acknowledgements stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import time
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from nats.js import JetStreamContext
from nats.js.kv import KeyValue

from ranksight.core.kvlease import NATS_ERRORS, KvLeases, live_entries

if TYPE_CHECKING:
    from ranksight.aggregator.settings import AggregatorView

log = logging.getLogger(__name__)
NodeKey = tuple[str, str]  # cluster, node
MEMBER = "member."
PARTITION = "partition."
# A round reading or writing the bucket can fail while a NATS server is lost; the next round tries again.
KEYS_TIMEOUT_S = 5.0
SHUTDOWN_WAIT_S = 3.0  # the aggregator gives ingest 5 s to stop: leave time to release the leases


def _score(member: str, partition: int) -> int:
    """Rendezvous weight of (member, partition): the same in every process (not Python's salted ``hash``)."""
    digest = hashlib.blake2b(f"{member}/{partition}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def assignment(partitions: int, members: Iterable[str]) -> dict[int, str]:
    """partition -> member: balanced rendezvous hashing. Pairs are taken by descending weight, each partition going to
    the first member with room; ``partitions % n`` members get one more than the others. Deterministic, and a member
    joining or leaving moves little more than its own share."""
    names = sorted(set(members))
    if not names:
        return {}
    base, extra = divmod(partitions, len(names))
    counts = dict.fromkeys(names, 0)
    bigger = 0  # members holding base + 1 already
    owner: dict[int, str] = {}
    pairs = sorted(((_score(m, p), m, p) for m in names for p in range(partitions)), reverse=True)
    for _, member, partition in pairs:
        if partition in owner:
            continue
        held = counts[member]
        if held < base or (held == base and bigger < extra):
            owner[partition] = member
            counts[member] = held + 1
            bigger += held == base
    return owner


def partition_key(partition: int) -> str:
    return f"{PARTITION}{partition}"


@dataclass
class PartitionIngest:
    """One held partition's ingest loop, and the nodes it saw (forgotten from live state when it goes)."""

    task: asyncio.Task[None]
    stop: asyncio.Event
    nodes: set[NodeKey] = field(default_factory=set)
    releasing: bool = False
    renewed_at: float = field(default_factory=time.monotonic)
    # Taken though another member's share because it stayed free for a lease time: kept while these are the members
    # (giving it back to a member that does not take it would only repeat that every lease time).
    adopted_among: tuple[str, ...] = ()


IngestFactory = Callable[[int, asyncio.Event, set[NodeKey]], Coroutine[Any, Any, None]]


class ShardOwner:
    """The partitions this shard holds and ingests. ``ingest(p, stop, nodes)`` consumes partition ``p`` until ``stop``
    is set (after the batch in hand is committed and acknowledged), adding the nodes it sees to ``nodes``;
    ``forget(nodes)`` drops a lost partition's nodes from live state."""

    def __init__(
        self,
        js: JetStreamContext,
        settings: AggregatorView,
        ingest: IngestFactory,
        forget: Callable[[set[NodeKey]], None],
    ) -> None:
        cfg = settings.aggregator.shards
        self.shard_id = cfg.name()
        self.partitions = cfg.partitions
        self.ttl_s = cfg.lease_ttl_s
        self.interval_s = cfg.lease_ttl_s / 3
        self.leases = KvLeases(
            js, cfg.bucket, cfg.lease_ttl_s, self.shard_id, settings.nats.jetstream_replicas
        )
        self.ingest = ingest
        self.forget = forget
        self.lead = False  # set by the analysis lead; published in the member key
        self.held: dict[int, PartitionIngest] = {}
        self.members: list[str] = []
        self._free_since: dict[int, float] = {}
        self.started = time.monotonic()
        self.covered: set[int] = set()  # partitions some shard held at the last round that succeeded
        self.round_error: str | None = None  # why the last round failed; None once one succeeds
        self._told: set[str] = set()

    def problems(self) -> list[str]:
        """What keeps partitions from being ingested, once the shards have had two lease times to take them: the
        failing rounds' error, and the partitions no shard holds."""
        if time.monotonic() - self.started < 2 * self.ttl_s:
            return []
        found = [f"shard rounds fail: {self.round_error}"] if self.round_error else []
        untaken = [p for p in range(self.partitions) if p not in self.covered]
        if untaken:
            found.append(f"partitions held by no shard: {', '.join(map(str, untaken))}")
        for line in found:
            if line not in self._told:  # once each, not every round
                self._told.add(line)
                log.error("sharded ingest: %s", line)
        return found

    @property
    def ingesting(self) -> list[int]:
        return sorted(p for p, part in self.held.items() if not part.releasing)

    async def run(self, stop: asyncio.Event) -> None:
        """Rounds every ``lease_ttl_s / 3`` until ``stop``; then every partition stops cleanly and is released, and
        the member key goes, so the others take over at once."""
        try:
            while not stop.is_set():
                try:
                    await self.round()
                    self.round_error = None
                except NATS_ERRORS as exc:
                    self.round_error = str(exc) or type(exc).__name__
                    log.warning("shard round failed (%s); next round in %.1f s", exc, self.interval_s)
                    self._drop_expired()
                self.problems()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(stop.wait(), self.interval_s)
        finally:
            await self.shutdown()

    async def round(self) -> None:
        self._check_ingest()
        kv = await self.leases.kv()
        await self._publish_member(kv)
        keys = list(
            await asyncio.wait_for(live_entries(self.leases.js, kv, self.leases.bucket), KEYS_TIMEOUT_S)
        )
        self.members = sorted({k[len(MEMBER) :] for k in keys if k.startswith(MEMBER)} | {self.shard_id})
        mine = {p for p, m in assignment(self.partitions, self.members).items() if m == self.shard_id}
        await self._renew()
        members = tuple(self.members)
        for partition, part in list(self.held.items()):
            if partition not in mine and not part.releasing and part.adopted_among != members:
                self._begin_release(partition)
        await self._finish_releases()
        now = time.monotonic()
        taken = {
            int(k[len(PARTITION) :])
            for k in keys
            if k.startswith(PARTITION) and k[len(PARTITION) :].isdigit()
        }
        for partition in range(self.partitions):
            if partition in taken or partition in self.held:
                self._free_since.pop(partition, None)
                continue
            free_since = self._free_since.setdefault(partition, now)
            if partition in mine:
                await self._take(partition)
            elif now - free_since >= self.ttl_s:
                await self._take(partition, adopted_among=members)
        await self._publish_member(kv)
        self.covered = taken | set(self.held)

    def _check_ingest(self) -> None:
        """An ingest loop stopped by NATS (its consumer not reachable while a server is lost) starts again; one that
        failed otherwise fails the aggregator, as unsharded ingest does."""
        for partition, part in self.held.items():
            if not part.task.done() or part.task.cancelled():
                continue
            exc = part.task.exception()
            if isinstance(exc, NATS_ERRORS):
                if not part.releasing:  # (a partition being released is released, its ingest over anyway)
                    log.warning("ingest of partition %d stopped (%s); starting it again", partition, exc)
                    part.task = self._start(partition, part.stop, part.nodes)
            elif exc is not None:
                raise exc

    def _start(self, partition: int, stop: asyncio.Event, nodes: set[NodeKey]) -> asyncio.Task[None]:
        return asyncio.create_task(self.ingest(partition, stop, nodes), name=f"ingest-p{partition}")

    async def _publish_member(self, kv: KeyValue) -> None:
        doc = {"shard_id": self.shard_id, "partitions": self.ingesting, "lead": self.lead,
               "updated_ns": time.time_ns()}  # fmt: skip
        await kv.put(f"{MEMBER}{self.shard_id}", json.dumps(doc).encode())

    async def _renew(self) -> None:
        for partition, part in list(self.held.items()):
            if await self.leases.hold(partition_key(partition)):
                part.renewed_at = time.monotonic()
            else:
                self._lose(partition, "lease taken")

    def _drop_expired(self) -> None:
        """While the bucket does not answer (a NATS server lost), a lease not renewed for a lease time has expired:
        another shard may hold it once the bucket answers again."""
        now = time.monotonic()
        for partition, part in list(self.held.items()):
            if now - part.renewed_at >= self.ttl_s:
                self._lose(partition, "lease expired: not renewed for a lease time")

    def _lose(self, partition: int, why: str) -> None:
        """Fetch nothing more from ``partition`` (a commit in flight still acknowledges its batch, which only spares
        the new owner a redelivery)."""
        log.warning("shard %s lost partition %d (%s)", self.shard_id, partition, why)
        part = self.held.pop(partition)
        part.stop.set()
        self.leases.revisions.pop(partition_key(partition), None)  # not ours to renew any more
        self.forget(part.nodes)

    async def _finish_releases(self) -> None:
        """Release the leases of partitions whose ingest has stopped, waiting for that up to a round (a slow commit
        keeps the lease renewed until a later round)."""
        stopping = {p: part for p, part in self.held.items() if part.releasing}
        if not stopping:
            return
        await asyncio.wait([part.task for part in stopping.values()], timeout=self.interval_s)
        for partition, part in stopping.items():
            if part.task.done():
                await self.leases.release(partition_key(partition))
                del self.held[partition]
                self.forget(part.nodes)
                log.info("shard %s released partition %d", self.shard_id, partition)

    def _begin_release(self, partition: int) -> None:
        part = self.held[partition]
        part.releasing = True
        part.stop.set()

    async def _take(self, partition: int, adopted_among: tuple[str, ...] = ()) -> None:
        if not await self.leases.hold(partition_key(partition)):
            return
        stop = asyncio.Event()
        nodes: set[NodeKey] = set()
        task = self._start(partition, stop, nodes)
        self.held[partition] = PartitionIngest(task, stop, nodes, adopted_among=adopted_among)
        self._free_since.pop(partition, None)
        log.info("shard %s holds partition %d", self.shard_id, partition)

    async def shutdown(self) -> None:
        for part in self.held.values():
            part.stop.set()
        tasks = [part.task for part in self.held.values()]
        if tasks:
            await asyncio.wait(tasks, timeout=SHUTDOWN_WAIT_S)
        with contextlib.suppress(*NATS_ERRORS):
            for partition, part in list(self.held.items()):
                if part.task.done():
                    await self.leases.release(partition_key(partition))
            kv = await self.leases.kv()
            await kv.delete(f"{MEMBER}{self.shard_id}")
        for part in self.held.values():
            part.task.cancel()
        self.held.clear()
