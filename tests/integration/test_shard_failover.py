"""Sharded ingest across failures: 3 NATS servers (stream and KV on all three), 3 ``ranksight aggregator`` shards with
their own DuckDB files, 12 simulated agents publishing steadily; the server leading the leases' bucket and one shard
are SIGKILLed mid-stream. Every record ends up in exactly one live shard or in the killed shard's file, none twice in
any one file, and the killed shard's partitions are taken over within the lease time and a few seconds.

The one way a record can be in two files is counted apart and bounded: the killed shard committed it and died before
its acknowledgement reached the stream, so the stream redelivered it to the partition's new owner."""

from __future__ import annotations

from pathlib import Path

from ranksight.core.natsserver import NatsCluster
from ranksight.settings import Settings
from tests.loadgen import SyntheticAgent
from tests.shard_topology import ShardTopology, failover
from tests.support import wait_for

PARTITIONS = 6
LEASE_TTL_S = 10.0  # above a JetStream leader election on a loaded 2-core machine (several seconds)
AGENTS = 12
ROUNDS = 100  # every 0.1 s each agent publishes a batch: the stream goes on well past the takeover
CHUNK = 20


async def test_a_shard_and_a_nats_server_killed_mid_stream_lose_nothing(
    cluster_settings: Settings, nats_cluster: NatsCluster, tmp_path: Path
) -> None:
    settings = cluster_settings
    topology = ShardTopology(settings, tmp_path / "shards", PARTITIONS, LEASE_TTL_S)
    await topology.create_stream()
    ids = ["shard-a", "shard-b", "shard-c"]
    agents: list[SyntheticAgent] = []
    try:
        for shard_id in ids:
            topology.start(shard_id)
        await wait_for(lambda: topology.settled(ids), timeout=60, interval=0.5)
        agents = [
            await SyntheticAgent(settings, f"sim-{i}", records_per_batch=CHUNK).start() for i in range(AGENTS)
        ]
        outcome = await failover(topology, nats_cluster, agents, "shard-b", ROUNDS, CHUNK)
    except BaseException:
        print(topology.logs())
        raise
    finally:
        for a in agents:
            await a.close()
        topology.stop()
    result = outcome.tally
    print(f"\n{result}; takeover {outcome.takeover_s:.1f} s (lease {LEASE_TTL_S:g} s)")
    assert result.published == AGENTS * ROUNDS * CHUNK
    assert result.lost == 0 and result.stray == 0
    assert result.doubled_in_a_shard == dict.fromkeys(ids, 0)
    assert result.doubled_across_live == 0
    # what the new owner got again was committed in the killed shard's last moments: the acknowledgement window
    assert result.last_kill_commit_age_s <= settings.aggregator.ack_wait_s + 2
    assert outcome.takeover_s <= LEASE_TTL_S + 8, "the killed shard's partitions were not taken over in time"
