"""Sharded aggregators on one machine, for the failover test and ``benchmarks/scaleout.py``: real ``ranksight
aggregator`` processes (each its own state dir, DuckDB and ``shard_id``) against a real NATS cluster, the shards' KV
bucket read back to see who holds what, and every record accounted for afterwards from the shards' DuckDB files.

Records are the synthetic agents' GPU records (:mod:`tests.loadgen`): ``(agent incarnation, memory_used_bytes)`` names
each one, so a record found twice, or nowhere, is exact.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import nats.errors
import nats.js.errors

from ranksight.aggregator.runtime import ensure_stream
from ranksight.aggregator.shards import MEMBER, PARTITION
from ranksight.core.natsconn import connect
from ranksight.core.natsserver import NatsCluster, NatsServer
from ranksight.settings import Settings
from tests.loadgen import SyntheticAgent
from tests.support import ranksight_cmd, settings_env, wait_for

RecordKey = tuple[str, int]  # agent incarnation, counter


@dataclass
class Shard:
    shard_id: str
    state_dir: Path
    process: subprocess.Popen[bytes]
    killed: bool = False

    @property
    def db(self) -> Path:
        return self.state_dir / "ranksight.duckdb"

    def kill(self) -> None:
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(10)
        self.killed = True

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM: the shard stops its ingest cleanly, releases its partitions and its member key."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode

    def records(self) -> list[tuple[str, int, int]]:
        """(agent, counter, receipt ns) of every GPU row in this shard's DuckDB (a killed shard's file too: DuckDB
        replays its write-ahead log on open)."""
        if not self.db.exists():
            return []
        con = duckdb.connect(str(self.db), read_only=True)
        try:
            rows = con.execute("SELECT agent, memory_used_bytes, epoch_ns(recv_ts) FROM gpu").fetchall()
        except duckdb.CatalogException:
            return []  # no batch was ever committed
        finally:
            con.close()
        return [(str(a), int(c), int(r)) for a, c, r in rows]


@dataclass
class ShardTopology:
    """``ranksight aggregator`` shards sharing ``settings``' NATS and stream, split into ``partitions``."""

    settings: Settings
    root: Path
    partitions: int
    lease_ttl_s: float
    env_extra: dict[str, str] = field(default_factory=dict)  # more settings for every shard, as variables
    shards: dict[str, Shard] = field(default_factory=dict)

    async def create_stream(self) -> None:
        """The partitioned event stream, so agents can publish before any shard runs."""
        shards = self.settings.aggregator.shards.model_copy(update={"partitions": self.partitions})
        aggregator = self.settings.aggregator.model_copy(update={"shards": shards})
        nc = await connect(self.settings.nats, "test-shard-stream")
        try:
            for attempt in range(
                3
            ):  # creating a stream on 3 servers can outlast the API timeout on a loaded machine
                try:
                    await ensure_stream(
                        nc.jetstream(), self.settings.model_copy(update={"aggregator": aggregator})
                    )
                    return
                except nats.errors.TimeoutError:
                    if attempt == 2:
                        raise
        finally:
            await nc.close()

    def env(self, shard_id: str) -> dict[str, str]:
        env = settings_env(self.settings)
        env.update(
            RANKSIGHT_STATE_DIR=str(self.root / shard_id),
            RANKSIGHT_SUBJECT_PREFIX=self.settings.subject_prefix,
            RANKSIGHT_AGGREGATOR__STREAM=self.settings.aggregator.stream,
            RANKSIGHT_NATS__JETSTREAM_REPLICAS=str(self.settings.nats.jetstream_replicas),
            RANKSIGHT_AGGREGATOR__ACK_WAIT_S=str(self.settings.aggregator.ack_wait_s),
            RANKSIGHT_AGGREGATOR__SHARDS__PARTITIONS=str(self.partitions),
            RANKSIGHT_AGGREGATOR__SHARDS__SHARD_ID=shard_id,
            RANKSIGHT_AGGREGATOR__SHARDS__LEASE_TTL_S=str(self.lease_ttl_s),
        )
        env.update(self.env_extra)
        return env

    def start(self, shard_id: str) -> Shard:
        state_dir = self.root / shard_id
        state_dir.mkdir(parents=True, exist_ok=True)
        with open(state_dir / "aggregator.log", "ab") as log:
            process = subprocess.Popen(ranksight_cmd("aggregator"), env=self.env(shard_id),
                                       stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
        self.shards[shard_id] = shard = Shard(shard_id, state_dir, process)
        return shard

    @property
    def live(self) -> list[Shard]:
        return [s for s in self.shards.values() if not s.killed]

    def stop(self) -> None:
        for shard in self.live:
            shard.stop()

    def logs(self) -> str:
        """The tail of every shard's log, for a failing assertion's message."""
        return "\n".join(f"--- {s.shard_id}\n{(s.state_dir / 'aggregator.log').read_text()[-3000:]}"
                         for s in self.shards.values())  # fmt: skip

    async def bucket(self) -> tuple[dict[int, str], dict[str, list[int]]]:
        """(partition -> holder, member -> partitions it ingests) as the shards' KV bucket says now."""
        cfg = self.settings.aggregator.shards
        nc = await connect(self.settings.nats, "test-shard-bucket")
        try:
            kv = await nc.jetstream().key_value(cfg.bucket)
            try:
                keys = await kv.keys()
            except nats.js.errors.NoKeysError:
                keys = []
            holders: dict[int, str] = {}
            members: dict[str, list[int]] = {}
            for key in keys:
                with_value = await kv.get(key)
                value = (with_value.value or b"").decode()
                if key.startswith(PARTITION):
                    holders[int(key[len(PARTITION) :])] = value
                elif key.startswith(MEMBER):
                    members[key[len(MEMBER) :]] = json.loads(value)["partitions"]
            return holders, members
        finally:
            await nc.close()

    async def settled(self, shard_ids: Iterable[str]) -> bool:
        """Every partition held, by these shards only, each ingesting what it holds."""
        try:
            holders, members = await self.bucket()
        except (TimeoutError, nats.errors.Error, nats.js.errors.Error):
            return False  # the bucket not created yet, or a server lost
        wanted = set(shard_ids)
        held: dict[str, list[int]] = collections.defaultdict(list)
        for partition, holder in sorted(holders.items()):
            held[holder].append(partition)
        return (
            len(holders) == self.partitions
            and set(held) == wanted
            and set(members) == wanted
            and all(members[s] == held[s] for s in wanted)
        )

    def durables(self) -> list[str]:
        """The aggregators' durable consumers: one per partition (one in all when not sharded)."""
        durable = self.settings.aggregator.durable
        return [f"{durable}-p{p}" for p in range(self.partitions)] if self.partitions else [durable]

    async def drained(self) -> bool:
        """Every durable consumer has delivered and had acknowledged everything."""
        cfg = self.settings.aggregator
        nc = await connect(self.settings.nats, "test-shard-drained")
        try:
            js = nc.jetstream()
            for durable in self.durables():
                info = await js.consumer_info(cfg.stream, durable)
                if info.num_pending or info.num_ack_pending:
                    return False
            return True
        except (TimeoutError, nats.errors.Error, nats.js.errors.Error):
            return False  # not created yet, or a consumer electing its leader after a server was lost
        finally:
            await nc.close()


@dataclass
class Tally:
    """Where every published record ended up."""

    published: int
    lost: int  # in no shard's file
    doubled_in_a_shard: dict[str, int]  # per shard: rows beyond the first of a record
    doubled_across_live: int  # records in two live shards
    # committed by the killed shard and not acknowledged before the kill, so redelivered to the partition's new
    # owner: the one way a record can be in two files; both rows are the same record, each file holds it once
    redelivered_after_kill: int
    stray: int  # rows no agent published
    last_kill_commit_age_s: float = (
        0.0  # the oldest such row's receipt, seconds before the killed shard's last
    )

    def __str__(self) -> str:
        return (
            f"published {self.published}, lost {self.lost}, doubled within a shard {self.doubled_in_a_shard}, "
            f"in two live shards {self.doubled_across_live}, in the killed shard's file and again in its "
            f"partition's new owner (committed, not acknowledged before the kill) {self.redelivered_after_kill}"
        )


def tally(published: Iterable[RecordKey], shards: Iterable[Shard]) -> Tally:
    sent = set(published)
    found: dict[RecordKey, list[str]] = collections.defaultdict(list)
    doubled: dict[str, int] = {}
    killed_recv: dict[RecordKey, int] = {}
    killed_last = 0
    for shard in shards:
        rows = shard.records()
        keys = collections.Counter((agent, counter) for agent, counter, _ in rows)
        doubled[shard.shard_id] = sum(n - 1 for n in keys.values())
        for key in keys:
            found[key].append(shard.shard_id)
        if shard.killed:
            killed_recv = {(a, c): r for a, c, r in rows}
            killed_last = max(killed_recv.values(), default=0)
    killed = {s.shard_id for s in shards if s.killed}
    across_live = after_kill = 0
    oldest = killed_last
    for key, where in found.items():
        live = [s for s in where if s not in killed]
        across_live += len(live) > 1
        if len(live) == 1 and len(where) > 1:
            after_kill += 1
            oldest = min(oldest, killed_recv[key])
    return Tally(
        published=len(sent),
        lost=len(sent - set(found)),
        doubled_in_a_shard=doubled,
        doubled_across_live=across_live,
        redelivered_after_kill=after_kill,
        stray=len(set(found) - sent),
        last_kill_commit_age_s=(killed_last - oldest) / 1e9,
    )


def published(agents: Iterable[SyntheticAgent]) -> list[RecordKey]:
    """Every record the synthetic agents emitted (their counters run 0 .. sent - 1)."""
    return [(a.incarnation, i) for a in agents for i in range(a.sent)]


async def bucket_leader(settings: Settings, cluster: NatsCluster) -> NatsServer:
    """The server leading the shards' KV bucket (its stream)."""
    nc = await connect(settings.nats, "test-bucket-leader")
    try:
        info = await nc.jetstream().stream_info(f"KV_{settings.aggregator.shards.bucket}")
    finally:
        await nc.close()
    assert info.cluster is not None
    return next(s for s in cluster.servers if s.cluster and s.cluster.name == info.cluster.leader)


@dataclass
class Failover:
    takeover_s: float  # from the shard's SIGKILL until the survivors hold every partition
    tally: Tally


async def failover(
    topology: ShardTopology,
    cluster: NatsCluster,
    agents: list[SyntheticAgent],
    victim: str,
    rounds: int,
    chunk: int,
    after_takeover: Callable[[], Awaitable[None]] | None = None,
) -> Failover:
    """With every shard of ``topology`` settled, ``agents`` publish ``chunk`` records each every 0.1 s for ``rounds``;
    2 s in, the server leading the shards' bucket is SIGKILLed (the hard case: the leases' stream elects a new leader
    meanwhile), 1 s later the shard ``victim``. Waits for the takeover, for every record to be delivered and
    acknowledged, then stops the live shards and counts where every record went. ``after_takeover`` (optional) runs
    once the survivors hold every partition, the agents still publishing (a benchmark's further figures)."""
    server = await bucket_leader(topology.settings, cluster)
    assert server.process is not None

    async def produce() -> None:
        for _ in range(rounds):
            for a in agents:
                await a.emit(chunk)
            await asyncio.sleep(0.1)

    producer = asyncio.create_task(produce())
    await asyncio.sleep(2)
    server.process.send_signal(signal.SIGKILL)
    server.process.wait(10)
    await asyncio.sleep(1)
    killed_at = time.monotonic()
    topology.shards[victim].kill()
    survivors = [shard.shard_id for shard in topology.live]
    await wait_for(lambda: topology.settled(survivors), timeout=topology.lease_ttl_s + 30, interval=0.2)
    takeover_s = time.monotonic() - killed_at
    if after_takeover is not None:
        await after_takeover()
    await producer
    for a in agents:
        assert await a.flush(60), "an agent could not deliver after the loss of one server"
    await wait_for(topology.drained, timeout=60, interval=0.5)
    topology.stop()
    return Failover(takeover_s, tally(published(agents), topology.shards.values()))
