"""A simulated cluster for the HTTP tests: real envelopes published to the real JetStream stream, as agents would.

Four nodes (``node000``..``node003``) with heartbeats, one GPU and one NIC each; one RCCL job whose RAS status is the
captured docs fragment with a DEAD process (``fixtures/ras``); Inspector records of a job simulated by
``ranksight.simulate.inspector`` with one slow GPU (node001, GPU 2), parsed by the agent's own parser; and link probes
where ``node000 -> node002`` runs at 40 Mbit/s among 10 Gbit/s links (``link_degraded``). The straggler job
(``STRAGGLER_JOB``) also has a RAS poll naming its communicators (as NCCL's STATUS reply does, so its Inspector
records belong to it) and step-time heartbeats from its ranks (``ranksight.client``).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import msgspec
import nats

from ranksight.agent.collectors.ras.parse_text import parse_status_text
from ranksight.formats.inspector import parse_op
from ranksight.schemas.codec import encode_event
from ranksight.schemas.envelope import Envelope
from ranksight.schemas.records import AppRecord, GpuRecord, HeartbeatRecord, NicRecord, ProbeRecord, RasRecord
from ranksight.schemas.records.ras import RasCommunicator
from ranksight.schemas.subjects import Subjects
from ranksight.schemas.wire import event_type
from ranksight.settings import Settings
from ranksight.simulate.inspector import Fault, JobSpec, comms, simulate, summarize

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "ras"
NODES = [f"node{i:03d}" for i in range(4)]
JOB = "slurm-77"
STRAGGLER_JOB = "slurm-78"
DEAD_PID = 3487984
SLOW = (1, 2)  # node index, GPU of the straggler
DEGRADED = ("node000", "node002")
FAST_BPS, SLOW_BPS = 1e10, 4e7


def http_settings(settings: Settings, **http: Any) -> Settings:
    """The test settings with the HTTP face on a free port and a fast straggler engine."""
    agg = settings.aggregator
    return settings.model_copy(update={"aggregator": agg.model_copy(update={
        "http": agg.http.model_copy(update={"port": 0, **http}),
        "stragglers": agg.stragglers.model_copy(update={"window_s": 2.0, "evaluate_every_s": 0.3,
                                                        "retain_windows": 60}),
    })})  # fmt: skip


class Publisher:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.subjects = Subjects(settings.subject_prefix)
        self.seq: dict[str, int] = {}

    async def __aenter__(self) -> Publisher:
        self.nc = await nats.connect(self.settings.nats.url)
        self.js = self.nc.jetstream()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.nc.close()

    async def send(self, node: str, kind: str, records: list[Any], ttl: float = 60.0) -> None:
        agent = f"sim-{node}"
        self.seq[agent] = seq = self.seq.get(agent, 0) + 1
        env = Envelope(type=event_type(kind), cluster=self.settings.cluster, node=node, agent=agent, seq=seq,
                       ts=time.time_ns(), ttl=ttl, records=records)  # fmt: skip
        await self.js.publish(self.subjects.event(env.cluster, node, kind), encode_event(env),
                              headers={"Nats-Msg-Id": f"{agent}:{seq}"})  # fmt: skip


async def publish_cluster(pub: Publisher, hardware_ttl: float = 60.0, with_stragglers: bool = True) -> None:
    for i, node in enumerate(NODES):
        beat = HeartbeatRecord(hostname=node, version="sim", pid=100 + i, started_ns=time.time_ns())
        await pub.send(node, "heartbeat", [beat])
        gpu = GpuRecord(index=0, name="MI300X", utilization_pct=90.0, memory_used_bytes=1 << 34,
                        memory_total_bytes=192 << 30, power_w=600.0, temperature_edge_c=55.0, throttled=False,
                        ecc_uncorrectable=0, sclk_hz=2.1e9, uuid=f"GPU-{i:08x}")  # fmt: skip
        await pub.send(node, "gpu", [gpu], ttl=hardware_ttl)
        nic = NicRecord(name="mlx5_0/1", kind="rdma", state="ACTIVE", speed_bps=4e11, tx_bps=8e9, rx_bps=8e9,
                        errors_per_s=0.0, congestion_per_s=0.0)  # fmt: skip
        await pub.send(node, "nic", [nic], ttl=hardware_ttl)
    status = parse_status_text((FIXTURES / "nccl_2.24_docs_fragment_errors_dead_process.txt").read_bytes())
    await pub.send(
        "node000",
        "ras",
        [RasRecord(job_id=JOB, endpoint="localhost:28028", **msgspec.structs.asdict(status))],
    )
    for src, dst in [("node000", "node001"), ("node001", "node003"), ("node002", "node003"), DEGRADED]:
        bps = SLOW_BPS if (src, dst) == DEGRADED else FAST_BPS
        rec = ProbeRecord(src=src, dst=dst, dst_addr=f"10.0.0.{NODES.index(dst) + 1}", rtt_us=50.0,
                          jitter_us=5.0, upload_bps=bps, download_bps=bps)  # fmt: skip
        await pub.send(src, "probe", [rec], ttl=hardware_ttl)
    if with_stragglers:
        await publish_straggler_job(pub)


async def publish_straggler_job(pub: Publisher) -> None:
    spec = JobSpec(
        nodes=4, gpus_per_node=4, steps=200, faults=[Fault("gpu", node=SLOW[0], gpu=SLOW[1], factor=2.0)]
    )
    spec.start_us = time.time_ns() // 1000 - 20_000_000  # running for 20 s
    for (host, _pid), lines in simulate(spec).items():
        records = [parse_op(line) for line in lines]
        for start in range(0, len(records), 2000):
            await pub.send(host, "inspector", records[start : start + 2000], ttl=300.0)
        summaries = [summary for _, summary in summarize(records)]  # what the node's agent sends
        for start in range(0, len(summaries), 2000):
            await pub.send(host, "inspector_summary", summaries[start : start + 2000], ttl=300.0)
    job_comms = [RasCommunicator(hash=f"0x{int(c.comm_id, 16):x}", size=len(c.members), status="RUNNING")
                 for phase in comms(spec) for c in phase]  # fmt: skip
    await pub.send(spec.hostname(0), "ras", [RasRecord(job_id=STRAGGLER_JOB, endpoint="localhost:28028", format="json",
                                                       health="ok", communicators=job_comms, nodes=spec.nodes,
                                                       processes=spec.nodes * spec.gpus_per_node, gpus=spec.nodes * spec.gpus_per_node)])  # fmt: skip
    for node in range(spec.nodes):
        beats = [AppRecord(event="heartbeat", job_id=STRAGGLER_JOB, rank=node * spec.gpus_per_node + gpu,
                           local_rank=gpu, pid=spec.pid(node, gpu), n=i, client_ts=spec.start_us * 1000 + i * 2 * 10**9,
                           step=i, step_time_s=1.0 + 0.01 * i)  # every rank waits for the straggler
                 for gpu in range(spec.gpus_per_node) for i in range(10)]  # fmt: skip
        await pub.send(spec.hostname(node), "app", beats)
