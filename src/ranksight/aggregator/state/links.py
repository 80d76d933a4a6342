"""The link map: the latest measurement of every (source, destination, transport, destination address), with expiry.

Pure and clock-injected like every tracker (design §5): facts expire at receipt time + TTL. It also keeps what the
probe planner needs: where each node can be probed (``probe_endpoint``), and which nodes run a job (fresh ``ras`` or
``inspector`` data), so heavy probes stay off them. Each link keeps its last ``history`` full measurements: the
``link_degraded`` rule compares a link with its own past.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ranksight.aggregator.forgetting import NodeKey, without_nodes
from ranksight.aggregator.state.jobs import JOB_KINDS
from ranksight.aggregator.timefmt import NS, iso
from ranksight.schemas.envelope import Envelope
from ranksight.schemas.records.probe import ProbeEndpointRecord, ProbeRecord

LinkKey = tuple[str, str, str, str, str]  # cluster, src, dst, transport, dst_addr


@dataclass
class Endpoint:
    cluster: str
    node: str
    addrs: list[str]
    port: int
    transport: str
    rail: str | None
    expires_ns: int


class Measurement(NamedTuple):
    """One full measurement of a link as its own history keeps it."""

    upload_bps: float | None
    download_bps: float | None
    stall_share: float  # the worse of the two ends' (0 when not reported)


@dataclass
class Link:
    cluster: str
    src: str
    dst: str
    transport: str
    dst_addr: str
    record: ProbeRecord
    measured_ns: int
    expires_ns: int
    fresh: bool = True
    history: deque[Measurement] = field(default_factory=deque)  # oldest first

    @property
    def key(self) -> LinkKey:
        return (self.cluster, self.src, self.dst, self.transport, self.dst_addr)


class LinkTracker:
    kinds = frozenset({"probe", "probe_endpoint"}) | JOB_KINDS

    def __init__(self, history: int = 20) -> None:
        self.history = history
        self.links: dict[LinkKey, Link] = {}
        self.endpoints: dict[NodeKey, Endpoint] = {}
        self.job_until: dict[NodeKey, int] = {}  # node -> expiry of its freshest job data
        self.now_ns = 0

    def observe(self, env: Envelope, recv_ns: int) -> None:
        expires = recv_ns + int(env.ttl * NS)
        node = (env.cluster, env.node)
        if env.kind in JOB_KINDS:
            self.job_until[node] = max(self.job_until.get(node, 0), expires)
        elif env.kind == "probe_endpoint":
            ep: ProbeEndpointRecord = env.records[-1]
            current = self.endpoints.get(node)
            if current is None or current.expires_ns <= expires:
                self.endpoints[node] = Endpoint(
                    env.cluster, env.node, ep.addrs, ep.port, ep.transport, ep.rail, expires
                )
        else:
            for rec in env.records:
                self._observe_probe(env.cluster, rec, recv_ns, expires)

    def _observe_probe(self, cluster: str, rec: ProbeRecord, recv_ns: int, expires_ns: int) -> None:
        key = (cluster, rec.src, rec.dst, rec.transport, rec.dst_addr)
        link = self.links.get(key)
        if link is not None and link.measured_ns > recv_ns:
            return  # an older fact never replaces a newer one
        history = link.history if link is not None else deque(maxlen=self.history)
        if rec.mode == "full" and rec.error is None and (rec.upload_bps or rec.download_bps):
            history.append(Measurement(rec.upload_bps, rec.download_bps, stall_share(rec)))
        self.links[key] = Link(cluster, rec.src, rec.dst, rec.transport, rec.dst_addr, rec, recv_ns, expires_ns,
                               self.now_ns < expires_ns, history)  # fmt: skip

    def tick(self, now_ns: int) -> None:
        self.now_ns = now_ns
        for link in self.links.values():
            link.fresh = now_ns < link.expires_ns

    def forget(self, nodes: set[NodeKey]) -> None:
        """Drop the nodes' endpoints and job marks, and every link from or to them."""
        self.endpoints = without_nodes(self.endpoints, nodes)
        self.job_until = without_nodes(self.job_until, nodes)
        self.links = {key: link for key, link in self.links.items()
                      if (link.cluster, link.src) not in nodes and (link.cluster, link.dst) not in nodes}  # fmt: skip

    # -- what the planner asks ----------------------------------------------------------------------------------
    def runs_job(self, cluster: str, node: str, now_ns: int) -> bool:
        return now_ns < self.job_until.get((cluster, node), 0)

    def live_endpoints(self, cluster: str, now_ns: int) -> list[Endpoint]:
        return sorted((e for e in self.endpoints.values() if e.cluster == cluster and now_ns < e.expires_ns),
                      key=lambda e: e.node)  # fmt: skip

    def clusters(self) -> set[str]:
        return {c for c, _ in self.endpoints}

    def is_fresh(self, key: LinkKey, now_ns: int) -> bool:
        link = self.links.get(key)
        return link is not None and now_ns < link.expires_ns


def stall_share(rec: ProbeRecord) -> float:
    """The worse of the two ends' stalled share of a measurement (0 when neither reported one)."""
    return max(rec.src_stall_share or 0.0, rec.dst_stall_share or 0.0)


def link_rows(
    tracker: LinkTracker, cluster: str | None = None
) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """The link map as API rows, and the nodes whose heavy probes are skipped (they run a job)."""
    rows = []
    for link in sorted(tracker.links.values(), key=lambda link: link.key):
        if cluster and link.cluster != cluster:
            continue
        r = link.record
        rows.append({
            "cluster": link.cluster, "src": link.src, "dst": link.dst, "transport": link.transport,
            "dst_addr": link.dst_addr, "mode": r.mode, "upload_bps": r.upload_bps, "download_bps": r.download_bps,
            "rtt_us": r.rtt_us, "jitter_us": r.jitter_us, "src_stall_share": r.src_stall_share,
            "dst_stall_share": r.dst_stall_share, "measured": iso(link.measured_ns),
            "expires": iso(link.expires_ns), "state": "fresh" if link.fresh else "expired", "skipped": r.skipped,
            "error": r.error,
        })  # fmt: skip
    skipped = [
        {"cluster": c, "node": n, "reason": "runs a job (fresh RAS or Inspector data): heavy probes skipped"}
        for (c, n) in sorted(tracker.endpoints)
        if (not cluster or c == cluster) and tracker.runs_job(c, n, tracker.now_ns)
    ]
    return rows, skipped
