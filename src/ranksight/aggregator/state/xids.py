"""Live Xid events per (cluster, node, PCI address, kind, code): the latest of each, valid until receipt + its TTL,
with how often it came within that time. Pure and clock-injected like every tracker."""

from __future__ import annotations

from dataclasses import dataclass, field

from ranksight.aggregator.forgetting import NodeKey, without_nodes
from ranksight.aggregator.timefmt import NS
from ranksight.schemas.envelope import Envelope

XidKey = tuple[str, str, str, str, int]  # cluster, node, pci, kind, code


@dataclass(frozen=True)
class XidEvent:
    cluster: str
    node: str
    pci: str
    kind: str
    code: int
    message: str
    pid: int | None
    process: str | None
    first_ns: int
    last_ns: int
    expires_ns: int
    count: int


@dataclass
class XidTracker:
    kinds: frozenset[str] = frozenset({"gpu_xid"})
    live: dict[XidKey, XidEvent] = field(default_factory=dict)

    def observe(self, env: Envelope, recv_ns: int) -> None:
        expires = recv_ns + int(env.ttl * NS)
        for rec in env.records:
            key = (env.cluster, env.node, rec.pci or "", rec.kind, rec.code)
            seen = self.live.get(key)
            self.live[key] = XidEvent(
                cluster=env.cluster, node=env.node, pci=rec.pci or "", kind=rec.kind, code=rec.code,
                message=rec.message, pid=rec.pid, process=rec.process,
                first_ns=seen.first_ns if seen else recv_ns, last_ns=recv_ns,
                expires_ns=max(expires, seen.expires_ns if seen else 0), count=(seen.count if seen else 0) + 1,
            )  # fmt: skip

    def tick(self, now_ns: int) -> None:
        for key in [k for k, e in self.live.items() if e.expires_ns <= now_ns]:
            del self.live[key]

    def forget(self, nodes: set[NodeKey]) -> None:
        self.live = without_nodes(self.live, nodes)
