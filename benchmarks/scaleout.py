"""Scale-out benchmark (issue 22): 3 NATS servers and aggregator shards on this machine, simulated agents publishing.

One 3-server NATS cluster (stream and KV at replicas 3) serves every phase of one run:

1. **Ingest capacity, one aggregator**: a backlog of ``--agents`` x ``--records`` GPU records is published while the
   aggregator's durable consumer is paused (JetStream consumer pause), then the consumer resumes and the time to ingest
   it all is measured: records/s.
2. **Ingest capacity, 3 shards**: the same backlog (the same offered load) on a stream of ``--partitions`` partitions,
   all partitions' consumers paused and resumed at once, drained by 3 ``ranksight aggregator`` shards; records/s and
   the ratio to phase 1.
3. **Failover**, on those running shards: the agents publish steadily; the server leading the shards' KV bucket is
   SIGKILLed, then one shard; prints records lost, doubled within a shard, in two live shards, redelivered to the
   killed shard's partitions' new owner (committed, not acknowledged before the kill: counted apart), and the time to
   take over; and alert continuity across that failover (the shard killed is the analysis lead): a node whose GPUs
   report uncorrectable ECC errors, and a straggling job (GPU 2 of node0001 1.6x slow, published as its agents'
   summary parts): each alert fires once and stays firing; a fault injected after the takeover fires too.

Every aggregator is a real process (as deployed); the agents are in this process (tests/loadgen.py: the real batcher
and publisher). On a 2-core machine the 3 NATS servers, the shards and the agents share the cores, so the capacity
ratio shows what sharding costs or gains here, not what 3 machines would give.

    python benchmarks/scaleout.py [--agents 12] [--records 20000] [--partitions 6] [--lease-ttl 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from nats.aio.client import Client

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from msgspec.structs import replace

from benchmarks.alert_continuity import AlertContinuity
from benchmarks.scale import SLOW, SimulatedNode, build_templates, inspector_schedule
from ranksight.agent.collectors.inspector.settings import InspectorSettings
from ranksight.aggregator.lead import LEAD_KEY
from ranksight.core.kvlease import NATS_ERRORS
from ranksight.core.natsconn import connect
from ranksight.core.natsserver import NatsCluster
from ranksight.schemas.records import GpuRecord
from ranksight.schemas.subjects import Subjects
from ranksight.settings import Settings, load_settings
from tests.loadgen import SyntheticAgent
from tests.shard_topology import ShardTopology, failover
from tests.support import wait_for

SHARDS = ["shard-a", "shard-b", "shard-c"]
BATCH = 500  # records per message of the backlog
FAILOVER_CHUNK = 20  # records per agent every 0.1 s during the failover


def phase_settings(root: Path, url: str, name: str) -> Settings:
    """Each phase its own stream and subjects on the one cluster (a stream's partitioning is fixed)."""
    return load_settings(
        None,
        cluster="bench",
        state_dir=root / name,
        subject_prefix=f"{name}.v1",
        nats={"url": url, "jetstream_replicas": 3},
        aggregator={"stream": name.upper(), "ack_wait_s": 5.0, "http": {"port": 0}},
    )


async def pause(topology: ShardTopology, paused: bool) -> None:
    """Pause (or resume) every durable consumer of ``topology`` (JetStream's consumer pause, nats-server 2.11+)."""
    until = "2100-01-01T00:00:00Z" if paused else "1970-01-01T00:00:00Z"
    nc = await connect(topology.settings.nats, "bench-pause")
    try:
        for durable in topology.durables():
            subject = f"$JS.API.CONSUMER.PAUSE.{topology.settings.aggregator.stream}.{durable}"
            answer = json.loads(
                (await nc.request(subject, json.dumps({"pause_until": until}).encode(), 5)).data
            )
            if "error" in answer:
                raise RuntimeError(f"pausing {durable}: {answer['error']}")
    finally:
        await nc.close()


async def consumers_exist(topology: ShardTopology) -> bool:
    nc = await connect(topology.settings.nats, "bench-consumers")
    try:
        js = nc.jetstream()
        for durable in topology.durables():
            await js.consumer_info(topology.settings.aggregator.stream, durable)
        return True
    except Exception:
        return False
    finally:
        await nc.close()


async def capacity(topology: ShardTopology, shard_ids: list[str], args: argparse.Namespace) -> float:
    """Records/s at which ``shard_ids`` ingest the same backlog, their consumers paused while it is published."""
    await topology.create_stream()
    for shard_id in shard_ids:
        topology.start(shard_id)
    if topology.partitions:
        await wait_for(lambda: topology.settled(shard_ids), timeout=120, interval=0.5)
    await wait_for(lambda: consumers_exist(topology), timeout=120, interval=0.3)
    await pause(topology, True)
    agents = [await SyntheticAgent(topology.settings, f"sim-{i}", records_per_batch=BATCH).start()
              for i in range(args.agents)]  # fmt: skip
    try:
        for _ in range(args.records // BATCH):
            for a in agents:
                await a.emit(BATCH)
        for a in agents:
            assert await a.flush(120), "the backlog could not be published"
    finally:
        for a in agents:
            await a.close()
    started = time.monotonic()
    await pause(topology, False)
    await wait_for(topology.drained, timeout=600, interval=0.1)
    return sum(a.sent for a in agents) / (time.monotonic() - started)


class FaultyAgent(SyntheticAgent):
    """A node whose every GPU reports uncorrectable ECC errors: a steady fault (one ``gpu_ecc_uncorrectable`` alert
    per GPU), whose alerts must fire once and stay firing across the failover."""

    def make_records(self, n: int) -> list[GpuRecord]:
        return [replace(r, **{"ecc_uncorrectable": 2}) for r in super().make_records(n)]


class StragglerFeed:
    """A 4-node x 8-GPU job whose GPU 2 of node0001 is 1.6x slow throughout, published in real time as its agents
    would (summary parts, sampled raw records: scale.py's templates, built through the agents' own summarizer and
    sampler): its ``straggler`` alert must fire once and stay firing across the lead's failover."""

    node = f"node{SLOW[0]:04d}"

    def __init__(self, prefix: str, seconds: float) -> None:
        start_us, templates, _ = build_templates(seconds, 0.0)
        window_us = int(InspectorSettings().summary_window_s * 1e6)
        now_us = time.time_ns() // 1000
        shift = (
            now_us - now_us % window_us + window_us - start_us
        )  # the job starts at the next window boundary
        self.schedule = sorted(
            ((due, i, node, template)
             for i, (node, template_node) in enumerate(
                 (SimulatedNode(0, i, prefix), t) for i, t in enumerate(templates[True]))
             for due, template in inspector_schedule(template_node, shift)),
            key=lambda item: item[:2],
        )  # fmt: skip

    async def run(self, nc: Client) -> None:
        for due_us, _, node, template in self.schedule:
            wait_s = due_us / 1e6 - time.time()
            if wait_s > 0:
                await asyncio.sleep(wait_s)
            subject, data, headers = node.message(template)
            await nc.publish(subject, data, headers=headers)


async def lead_holder(settings: Settings) -> str | None:
    """The shard holding the analysis lead now (the shards' KV bucket)."""
    nc = await connect(settings.nats, "bench-lead")
    try:
        kv = await nc.jetstream().key_value(settings.aggregator.shards.bucket)
        return (await kv.get(LEAD_KEY)).value.decode() or None  # type: ignore[union-attr]
    except NATS_ERRORS:
        return None
    finally:
        await nc.close()


async def failover_figures(topology: ShardTopology, cluster: NatsCluster, args: argparse.Namespace) -> None:
    """Phase 3 on the running, settled shards of ``topology``: prints one figure a line. The shard killed is the
    analysis lead, so the alert continuity of an injected fault (a node's GPUs with uncorrectable ECC errors,
    raised before the kill) is measured across a lead failover; a second fault injected after the takeover shows that
    the new lead evaluates."""
    settings = topology.settings
    agents = [await SyntheticAgent(settings, f"live-{i}", records_per_batch=FAILOVER_CHUNK).start()
              for i in range(args.agents)]  # fmt: skip
    faulty = await FaultyAgent(settings, "faulty", records_per_batch=FAILOVER_CHUNK).start()
    late = await FaultyAgent(settings, "faulty-late", records_per_batch=FAILOVER_CHUNK).start()
    nc = await connect(settings.nats, "bench-alerts")
    continuity = AlertContinuity("gpu_ecc_uncorrectable", node="faulty")
    successor = AlertContinuity("gpu_ecc_uncorrectable", node="faulty-late")
    straggling = AlertContinuity("straggler", node=StragglerFeed.node)
    subjects = Subjects(settings.subject_prefix)
    for follower in (continuity, successor, straggling):
        await follower.follow(nc, subjects)
    feed = asyncio.create_task(StragglerFeed(settings.subject_prefix, args.straggler_s).run(nc))

    async def fault_until(done: Callable[[], bool], timeout: float, *with_fault: SyntheticAgent) -> None:
        deadline = time.monotonic() + timeout
        while not done() and time.monotonic() < deadline:
            for a in with_fault:
                await a.emit(8)
            await asyncio.sleep(0.5)

    took_over: list[float] = []

    async def new_lead_evaluates() -> None:
        """After the takeover: the late fault fires (the successor evaluates), then both go on a while."""
        took_over.append(time.monotonic())
        await fault_until(lambda: successor.fired_at is not None, 120, faulty, late)
        settle = time.monotonic() + args.lease_ttl  # three of the new lead's lease rounds
        await fault_until(lambda: time.monotonic() > settle, 60, faulty, late)

    try:
        await fault_until(lambda: None not in (continuity.fired_at, straggling.fired_at), 120, faulty)
        victim = await lead_holder(settings) or "shard-b"
        outcome = await failover(topology, cluster, [*agents, faulty], victim, args.failover_rounds, FAILOVER_CHUNK,
                                 after_takeover=new_lead_evaluates)  # fmt: skip
    finally:
        feed.cancel()
        await asyncio.gather(feed, return_exceptions=True)
        for a in [*agents, faulty, late]:
            await a.close()
        await nc.close()
    t = outcome.tally
    sent = sum(a.sent for a in agents)
    print(f"failover: {sent} records published steadily by {args.agents} agents; the bucket's leader server and "
          f"{victim} (the analysis lead) SIGKILLed")  # fmt: skip
    print(f"  records lost                      {t.lost}")
    print(f"  doubled within a shard            {sum(t.doubled_in_a_shard.values())}  {t.doubled_in_a_shard}")
    print(f"  in two live shards                {t.doubled_across_live}")
    print(f"  redelivered to the new owner      {t.redelivered_after_kill}  (committed by the killed shard, not "
          f"acknowledged before the kill; within its last {t.last_kill_commit_age_s:.2f} s)")  # fmt: skip
    print(f"  time to take over                 {outcome.takeover_s:.1f} s  (lease {args.lease_ttl:g} s)")
    print(f"  {continuity.report(killed_at=took_over[0] - outcome.takeover_s)}")
    print(f"  {straggling.report(killed_at=took_over[0] - outcome.takeover_s)}")
    late_fired = "yes" if successor.fired_at is not None else "NO"
    print(f"  the new lead raises a fault injected after the takeover: {late_fired}")


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="scaleout-") as tmp:
        root = Path(tmp)
        cluster = NatsCluster(root / "nats", 3).start()
        single = ShardTopology(
            phase_settings(root, cluster.url, "single"), root / "single", 0, args.lease_ttl
        )
        sharded = ShardTopology(phase_settings(root, cluster.url, "sharded"), root / "sharded", args.partitions,
                                args.lease_ttl)  # fmt: skip
        try:
            one = await capacity(single, ["aggregator"], args)
            single.stop()
            three = await capacity(sharded, SHARDS, args)
            backlog = args.agents * (args.records // BATCH) * BATCH
            print(f"ingest capacity, {backlog} records backlog, 3 NATS servers (replicas 3), {args.partitions} "
                  f"partitions")  # fmt: skip
            print(f"  1 aggregator                      {one:,.0f} records/s")
            print(f"  3 shards                          {three:,.0f} records/s  (ratio {three / one:.2f})")
            await failover_figures(sharded, cluster, args)
        finally:
            single.stop()
            sharded.stop()
            cluster.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=12, help="simulated agents (nodes)")
    parser.add_argument("--records", type=int, default=20_000, help="backlog records per agent")
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--lease-ttl", type=float, default=10.0, help="aggregator.shards.lease_ttl_s")
    parser.add_argument("--failover-rounds", type=int, default=100, help="publish rounds (0.1 s apart)")
    parser.add_argument(
        "--straggler-s",
        type=float,
        default=240.0,
        help="seconds of the straggling job published (it must outlast the failover phase)",
    )
    asyncio.run(main(parser.parse_args()))
