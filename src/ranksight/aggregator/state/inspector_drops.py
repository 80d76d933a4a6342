"""Inspector ring drops per (cluster, node, process, communicator), from the ``inspector_dump_stats`` markers of
output format v4.1 and later.

Each communicator's dump states its record counts and the completed operations its rings dropped (in total, and since
the previous dump). A process whose rings overflow writes fewer records than its peers, so what the straggler engine
says about it rests on less data: :meth:`InspectorDropTracker.coverage` tells, per process and communicator, how much
was dropped of how much was recorded, for coverage statements. Pure and clock-injected like every tracker: a
process's counters are live until receipt + TTL of its latest marker, and kept (for coverage of past windows) until
its node is forgotten.

The plugin's other outputs (``inspector_metrics``: Prometheus textfiles, OTLP export) carry per-GPU counters instead
(operations recorded and dropped since the process started, with the stats option or in verbose OTLP): the latest of
each GPU is kept in :attr:`InspectorDropTracker.gpus`. Those the agent could tie to the process that posted them
(OTLP export) are that process's coverage (:meth:`InspectorDropTracker.gpu_coverage`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ranksight.aggregator.forgetting import NodeKey, without_nodes
from ranksight.aggregator.timefmt import NS
from ranksight.schemas.envelope import Envelope
from ranksight.schemas.records import InspectorDumpStatsRecord, InspectorMetricsRecord

DropKey = tuple[str, str, str, int, str]  # cluster, node, hostname, pid, comm_id
GpuKey = tuple[str, str, str, str]  # cluster, node, hostname, gpu


@dataclass
class GpuDrops:
    latest: InspectorMetricsRecord  # shape "device": coll/p2p totals and drops
    expires_ns: int


@dataclass
class CommDrops:
    """One process's view of one communicator: the latest marker's totals and what this tracker has summed."""

    latest: InspectorDumpStatsRecord
    expires_ns: int
    dumps: int = 0  # markers seen
    records: int = 0  # coll + p2p records the seen markers announced
    dropped: int = 0  # coll + p2p drops the seen markers reported since their previous dump

    @property
    def dropped_total(self) -> int:
        """Collective and p2p operations the process's rings dropped since it started (the plugin's counters)."""
        return self.latest.coll_dropped_total + self.latest.p2p_dropped_total

    @property
    def dropped_share(self) -> float:
        """Of the operations seen here (recorded + dropped), the share dropped: 0 when nothing was lost."""
        seen = self.records + self.dropped
        return self.dropped / seen if seen else 0.0


@dataclass
class InspectorDropTracker:
    kinds: frozenset[str] = frozenset({"inspector_dump_stats", "inspector_metrics"})
    comms: dict[DropKey, CommDrops] = field(default_factory=dict)
    gpus: dict[GpuKey, GpuDrops] = field(default_factory=dict)
    now_ns: int = 0

    def observe(self, env: Envelope, recv_ns: int) -> None:
        expires = recv_ns + int(env.ttl * NS)
        if env.kind == "inspector_metrics":
            for rec in env.records:
                if isinstance(rec, InspectorMetricsRecord) and rec.shape == "device":
                    self.gpus[(env.cluster, env.node, rec.hostname, rec.gpu)] = GpuDrops(rec, expires)
            return
        for rec in env.records:
            assert isinstance(rec, InspectorDumpStatsRecord)
            self.add_marker(env.cluster, env.node, rec, expires)

    def add_marker(self, cluster: str, node: str, rec: InspectorDumpStatsRecord, expires_ns: int) -> None:
        """One dump marker of a process's communicator (published by an agent, or read from dump files offline)."""
        key = (cluster, node, rec.hostname, rec.pid, rec.comm_id)
        state = self.comms.get(key)
        if state is not None and rec.dump_ts_us <= state.latest.dump_ts_us:
            return  # a marker seen already (redelivered) or older never replaces a newer one nor counts twice
        if state is None:
            state = self.comms[key] = CommDrops(rec, expires_ns)
        state.latest, state.expires_ns = rec, expires_ns
        state.dumps += 1
        state.records += rec.coll_records + rec.p2p_records
        state.dropped += rec.coll_dropped_since_last_dump + rec.p2p_dropped_since_last_dump

    def tick(self, now_ns: int) -> None:
        self.now_ns = now_ns

    def live(self) -> dict[DropKey, CommDrops]:
        """The counters whose latest marker is still within its TTL."""
        return {k: c for k, c in self.comms.items() if c.expires_ns > self.now_ns}

    def live_gpus(self) -> dict[GpuKey, GpuDrops]:
        """The per-GPU counters (metric outputs) still within their TTL."""
        return {k: g for k, g in self.gpus.items() if g.expires_ns > self.now_ns}

    def forget(self, nodes: set[NodeKey]) -> None:
        self.comms = without_nodes(self.comms, nodes)
        self.gpus = without_nodes(self.gpus, nodes)

    def gpu_coverage(self, cluster: str) -> dict[tuple[str, int], list[InspectorMetricsRecord]]:
        """The cluster's per-GPU counters of a known process (OTLP export) by (hostname, pid), live or not: what a
        straggler finding about a process without dump markers cites."""
        out: dict[tuple[str, int], list[InspectorMetricsRecord]] = {}
        for (c, _, host, _), drops in sorted(self.gpus.items()):
            if c == cluster and drops.latest.pid is not None:
                out.setdefault((host, drops.latest.pid), []).append(drops.latest)
        return out

    def coverage(self, cluster: str) -> dict[tuple[str, int, str], CommDrops]:
        """The cluster's drop counters by (hostname, pid, comm_id), live or not: what a straggler finding's coverage
        cites."""
        return {(k[2], k[3], k[4]): c for k, c in self.comms.items() if k[0] == cluster}
