"""Live GPU probe results per (cluster, node, GPU index), each valid until receipt + its TTL, plus a bounded history.

A result received while the node had fresh RAS or Inspector facts (a job was running there) is not trusted: the job
and the probe shared the GPU, so the numbers say nothing about the GPU. Such results are counted and dropped. Pure and
clock-injected like every tracker; replaying history rebuilds the same results.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from ranksight.aggregator.forgetting import NodeKey, without_nodes
from ranksight.aggregator.state.jobs import JOB_KINDS
from ranksight.aggregator.timefmt import NS
from ranksight.schemas.envelope import Envelope

METRICS = ("tflops_bf16", "tflops_fp16", "mem_bandwidth_bps")

GpuKey = tuple[str, str, int]  # cluster, node, index


@dataclass(frozen=True)
class ProbeResult:
    cluster: str
    node: str
    index: int
    name: str
    uuid: str | None
    recv_ns: int
    expires_ns: int
    tflops_bf16: float | None
    tflops_fp16: float | None
    mem_bandwidth_bps: float | None

    def metric(self, name: str) -> float | None:
        value: float | None = getattr(self, name)
        return value


@dataclass
class GpuProbeTracker:
    history_len: int = 20
    kinds: frozenset[str] = frozenset({"gpu_probe"}) | JOB_KINDS
    live: dict[GpuKey, ProbeResult] = field(default_factory=dict)
    history: dict[GpuKey, deque[ProbeResult]] = field(default_factory=dict)
    job_until_ns: dict[tuple[str, str], int] = field(default_factory=dict)
    discarded_busy: int = 0

    def observe(self, env: Envelope, recv_ns: int) -> None:
        node_key = (env.cluster, env.node)
        if env.kind in JOB_KINDS:
            until = recv_ns + int(env.ttl * NS)
            self.job_until_ns[node_key] = max(until, self.job_until_ns.get(node_key, 0))
            return
        for rec in env.records:
            if rec.status != "ok" or rec.index < 0:
                continue
            if recv_ns < self.job_until_ns.get(node_key, 0):
                self.discarded_busy += 1
                continue
            key = (env.cluster, env.node, rec.index)
            current = self.live.get(key)
            if current is not None and current.recv_ns >= recv_ns:
                continue  # an older (or the same) result never replaces a newer one
            result = ProbeResult(
                cluster=env.cluster, node=env.node, index=rec.index, name=rec.name or "unknown", uuid=rec.uuid,
                recv_ns=recv_ns, expires_ns=recv_ns + int(env.ttl * NS), tflops_bf16=rec.tflops_bf16,
                tflops_fp16=rec.tflops_fp16, mem_bandwidth_bps=rec.mem_bandwidth_bps,
            )  # fmt: skip
            self.live[key] = result
            self.history.setdefault(key, deque(maxlen=self.history_len)).append(result)

    def tick(self, now_ns: int) -> None:
        for key in [k for k, r in self.live.items() if r.expires_ns <= now_ns]:
            del self.live[key]

    def forget(self, nodes: set[NodeKey]) -> None:
        self.live = without_nodes(self.live, nodes)
        self.history = without_nodes(self.history, nodes)
        self.job_until_ns = without_nodes(self.job_until_ns, nodes)
