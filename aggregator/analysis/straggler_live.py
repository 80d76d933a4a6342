"""Online straggler analysis: a live-state tracker that folds Inspector records into one incremental engine per
cluster (:mod:`aggregator.analysis.stragglers`) and evaluates it on tick, and the ``straggler`` alert rule that reports
its findings.

Every record is folded in once (never re-analyzed); each evaluation judges the slices completed since the last one, a
sliding ``window_s`` horizon with a ``slice_s`` hop. In the aggregator this runs on a worker thread (``background=True``)
and its result is picked up by a later tick, so the event loop never waits for it: ``observe`` only queues records.
A cluster whose records stop arriving (by receipt time) for ``retain_windows`` x ``window_s`` is forgotten and its
alerts resolve. GPU and NIC samples of the same node are kept (latest per device) to corroborate each finding.

Each record is also folded, as it arrives, into the cluster's :class:`aggregator.analysis.hangs.HangFinder` (the last
``coll_sn`` per rank); the ``collective_hang`` rule asks it on every tick. A hung job is silent, so its collectives are
kept ``hang_retain_s`` (not the straggler horizon) after they last advanced.

Agents summarize (``inspector_summary``, per window) and publish raw records only at a bounded rate: summaries feed the
engine and the hang finder, and the raw records of a node that sent summaries within the last ``retain_windows`` x
``window_s`` are samples of what those carry, so they feed neither. An older agent's raw records feed both, as before.
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import cast

from ranksight.aggregator.alerts import Condition
from ranksight.aggregator.analysis.gpu_probe import gpu_evidence
from ranksight.aggregator.analysis.hangs import Hang, HangFinder, lagging_evidence
from ranksight.aggregator.analysis.ras import node_of
from ranksight.aggregator.analysis.stragglers import Finding, StragglerEngine, StragglerParams
from ranksight.aggregator.forgetting import NodeKey, without_nodes
from ranksight.aggregator.linkmap import link_tracker
from ranksight.aggregator.state import NS, LiveState
from ranksight.aggregator.timefmt import iso
from ranksight.config import StragglerSettings
from ranksight.schemas.envelope import Envelope
from ranksight.schemas.records import GpuRecord, InspectorRecord, InspectorSummaryRecord, NicRecord

log = logging.getLogger(__name__)


@dataclass
class ClusterFindings:
    findings: list[Finding] = field(default_factory=list)
    records: int = 0
    capture_model: str = "ring"
    evaluated_ns: int = 0


def params_of(settings: StragglerSettings) -> StragglerParams:
    return StragglerParams(window_s=settings.window_s, slice_s=settings.slice_s,
                           confirm_windows=settings.confirm_windows, evidence_z=settings.evidence_z)  # fmt: skip


class StragglerTracker:
    kinds = frozenset({"inspector", "inspector_summary", "gpu", "nic"})

    def __init__(self, settings: StragglerSettings | None = None) -> None:
        # queued by observe, folded in on evaluation
        self.pending: list[tuple[str, InspectorRecord | InspectorSummaryRecord]] = []
        self.summarizing: dict[NodeKey, int] = {}  # nodes that send summaries: receipt time of the latest
        self.dropped = 0  # records dropped because the queue was full (the worker fell behind)
        self.engines: dict[str, StragglerEngine] = {}  # touched only by the evaluation (worker thread)
        self.last_recv_ns: dict[str, int] = {}
        self.hang_finders: dict[str, HangFinder] = {}  # fed on the event loop: O(1) per record
        self._executor: ThreadPoolExecutor | None = None
        self._running: Future[dict[str, ClusterFindings]] | None = None
        self.configure(settings or StragglerSettings.model_validate({}))
        self.gpus: dict[tuple[str, str, int], GpuRecord] = {}
        self.nics: dict[tuple[str, str, str], NicRecord] = {}
        self.clusters: dict[str, ClusterFindings] = {}
        self._last_eval_ns = 0
        self._evaluated_once = False
        self._history: list[dict[str, object]] = []  # findings of each evaluation, not yet stored

    def configure(self, settings: StragglerSettings, background: bool = False) -> None:
        self.settings = settings
        if background and self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="stragglers")
        self.params = params_of(settings)

    @property
    def records(self) -> int:
        """Records folded into the engines so far (the ones still queued are not counted)."""
        return sum(engine.records for engine in self.engines.values())

    def observe(self, env: Envelope, recv_ns: int) -> None:
        summary = env.kind == "inspector_summary"
        if summary:
            self.summarizing[(env.cluster, env.node)] = recv_ns
        elif env.kind == "inspector" and (env.cluster, env.node) in self.summarizing:
            return  # a sample of what the node's summaries carry
        if env.kind in ("inspector", "inspector_summary"):
            room = self.settings.max_records - len(self.pending)
            if room < len(env.records):
                self.dropped += len(env.records) - max(room, 0)
            self.pending.extend((env.cluster, rec) for rec in env.records[: max(room, 0)])
            self.last_recv_ns[env.cluster] = recv_ns
            finder = self.hang_finders.get(env.cluster)
            if finder is None:
                finder = self.hang_finders[env.cluster] = HangFinder(self.settings.hang_quiet_s)
            for rec in env.records:
                if summary:
                    finder.add_summary(rec, recv_ns, env.node)
                else:
                    finder.add(rec, recv_ns, env.node)
        elif env.kind == "gpu":
            for gpu in env.records:
                self.gpus[(env.cluster, env.node, gpu.index)] = gpu
        elif env.kind == "nic":
            for nic in env.records:
                self.nics[(env.cluster, env.node, nic.name)] = nic

    def tick(self, now_ns: int) -> None:
        if self._running is not None and self._running.done():
            self._set_findings(self._running.result())
            self._running = None
        if self._running is not None or now_ns - self._last_eval_ns < self.settings.evaluate_every_s * NS:
            return
        self._last_eval_ns = now_ns
        for cluster, finder in list(self.hang_finders.items()):
            finder.forget_older_than(now_ns - int(self.settings.hang_retain_s * NS))
            if not finder.comm_ops:
                del self.hang_finders[cluster]
        horizon = now_ns - int(self.settings.retain_windows * self.settings.window_s * NS)
        gone = {cluster for cluster, ns in self.last_recv_ns.items() if ns < horizon}
        self.summarizing = {key: ns for key, ns in self.summarizing.items() if ns >= horizon}
        for cluster in gone:
            del self.last_recv_ns[cluster]
        batch, self.pending = self.pending, []
        # The first run (the replay at start) is inline: a rule evaluated before it would see no findings and
        # resolve alerts that are still true, then fire them again.
        first, self._evaluated_once = not self._evaluated_once, True
        if self._executor is None or first:
            self._set_findings(self._evaluate(batch, gone, now_ns))
        else:
            self._running = self._executor.submit(self._evaluate, batch, gone, now_ns)

    def hangs(self, cluster: str, now_ns: int) -> list[Hang]:
        finder = self.hang_finders.get(cluster)
        return finder.hangs(now_ns) if finder else []

    def forget(self, nodes: set[NodeKey]) -> None:
        """Drop the nodes' GPU and NIC samples and their processes in the hang finders (Inspector records age out
        by time, findings with them)."""
        self.gpus = without_nodes(self.gpus, nodes)
        self.summarizing = {key: ns for key, ns in self.summarizing.items() if key not in nodes}
        self.nics = without_nodes(self.nics, nodes)
        for cluster, finder in list(self.hang_finders.items()):
            finder.forget_nodes({node for c, node in nodes if c == cluster})
            if not finder.comm_ops:
                del self.hang_finders[cluster]

    def _set_findings(self, clusters: dict[str, ClusterFindings]) -> None:
        self.clusters = clusters
        for cluster, result in clusters.items():
            self._history += [{"evaluated_at": iso(result.evaluated_ns), "cluster": cluster,
                               "capture_model": result.capture_model, "records": result.records,
                               **{k: v for k, v in f.as_dict().items() if k not in ("evidence", "slow_comms")},
                               "evidence": f.evidence} for f in result.findings]  # fmt: skip

    def take_history(self) -> list[dict[str, object]]:
        """Findings of the evaluations since the last call, for the ``straggler_finding_history`` table."""
        rows, self._history = self._history, []
        return rows

    def _evaluate(
        self, batch: list[tuple[str, InspectorRecord | InspectorSummaryRecord]], gone: set[str], now_ns: int
    ) -> dict[str, ClusterFindings]:
        for cluster in gone:
            self.engines.pop(cluster, None)
        for cluster, rec in batch:
            engine = self.engines.get(cluster)
            if engine is None:
                engine = self.engines[cluster] = StragglerEngine(self.params)
            if hasattr(rec, "window_us"):  # a summary (twins of both kinds are plain structs)
                engine.add_summary(cast(InspectorSummaryRecord, rec))
            else:
                engine.add(cast(InspectorRecord, rec))
        out = {}
        for cluster, engine in self.engines.items():
            try:
                findings = engine.evaluate()
            except Exception:  # a bug or an input we did not foresee must never stop the aggregator's ticks
                log.exception(
                    "straggler analysis of cluster %s failed; keeping its previous findings", cluster
                )
                out[cluster] = self.clusters.get(cluster, ClusterFindings(evaluated_ns=now_ns))
                continue
            out[cluster] = ClusterFindings(findings, engine.records, engine.capture_model, now_ns)
        return out

    def corroboration(self, cluster: str, hostname: str) -> list[str]:
        """What GPU and NIC samples of the node say (the node name is the hostname unless configured otherwise)."""
        notes = []
        gpus = {key[2]: g for key, g in self.gpus.items() if key[0] == cluster}
        mine = {key[2]: g for key, g in self.gpus.items() if key[0] == cluster and key[1] == hostname}
        for index, gpu in sorted(mine.items()):
            if gpu.throttled:
                notes.append(f"GPU {index} throttled ({', '.join(gpu.throttle_reasons) or 'reason unknown'})")
            if gpu.ecc_uncorrectable:
                notes.append(f"GPU {index} has {gpu.ecc_uncorrectable} uncorrectable ECC errors")
        for what, unit, scale, get in _GPU_GAUGES:
            values = [v for g in gpus.values() if (v := get(g))]
            if len(values) < 3:
                continue
            typical = statistics.median(values)
            notes += [f"GPU {i} {what} {v / scale:.0f} {unit} vs {typical / scale:.0f} {unit} typical"
                      for i, g in sorted(mine.items()) if (v := get(g)) and abs(v - typical) > 0.1 * typical]  # fmt: skip
        speeds = [n.speed_bps for (c, _, _), n in self.nics.items() if c == cluster and n.speed_bps]
        typical_speed = statistics.median(speeds) if speeds else None
        for (c, node, name), nic in sorted(self.nics.items()):
            if c != cluster or node != hostname:
                continue
            if nic.state and nic.state.upper() not in ("ACTIVE", "UP"):
                notes.append(f"NIC {name} is {nic.state}")
            if nic.errors_per_s:
                notes.append(f"NIC {name} errors rising ({nic.errors_per_s:.1f}/s)")
            if nic.congestion_per_s:
                notes.append(f"NIC {name} congestion (CNP/ECN {nic.congestion_per_s:.0f}/s)")
            if nic.link_flaps:
                notes.append(f"NIC {name} link flapped {nic.link_flaps}x")
            if typical_speed and nic.speed_bps and nic.speed_bps < 0.9 * typical_speed:
                notes.append(
                    f"NIC {name} rate {nic.speed_bps / 1e9:.0f} Gb/s vs {typical_speed / 1e9:.0f} Gb/s typical"
                )
        return notes


_GPU_GAUGES: list[tuple[str, str, float, Callable[[GpuRecord], float | None]]] = [
    ("clock", "MHz", 1e6, lambda g: g.sclk_hz),
    ("power", "W", 1.0, lambda g: g.power_w),
    ("junction temperature", "C", 1.0, lambda g: g.temperature_junction_c),
]


def _link_notes(state: LiveState, cluster: str, hostname: str) -> list[str]:
    """Active link probes from or to the node that measured below their peers' median."""
    links = [link for link in link_tracker(state).links.values() if link.cluster == cluster and link.fresh]
    speeds = [v for link in links if (v := link.record.download_bps)]
    if len(speeds) < 3:
        return []
    typical = statistics.median(speeds)
    return [f"link probe {link.src} -> {link.dst}: {v / 1e9:.1f} Gbit/s vs {typical / 1e9:.1f} typical"
            for link in links if hostname in (link.src, link.dst) and (v := link.record.download_bps)
            and v < 0.7 * typical]  # fmt: skip


class StragglerRule:
    name = "straggler"

    def evaluate(self, state: LiveState, now_ns: int) -> Iterator[Condition]:
        tracker = state.stragglers
        for cluster, result in tracker.clusters.items():
            for f in result.findings:
                notes = tracker.corroboration(cluster, f.hostname)
                notes += [f"GPU {g['gpu']} active probe: {x['metric']} {x.get('drop', 0):.0%} below its {x.get('basis')}"
                          for g in gpu_evidence(state, cluster, f.hostname) for x in g["findings"]]  # fmt: skip
                if f.kind == "communication":
                    notes += _link_notes(state, cluster, f.hostname)
                yield Condition(
                    rule=self.name,
                    severity="warning" if f.slowdown < 1.5 else "critical",
                    cluster=cluster,
                    node=f.hostname,
                    key=f"{f.kind}:{f.pid}",  # comm and rank stay in the evidence: the fingerprint must not move
                    entity=f"pid {f.pid}" if f.pid is not None else "node",
                    summary=summary(f, notes),
                    evidence={**f.as_dict(), "corroboration": notes},
                )


class CollectiveHangRule:
    """One alert per cluster whose collectives stalled with ranks silent behind their peers (Inspector silence, ring
    capture); it names them, their communicators, collectives and nodes. Where RAS watches a live job of the cluster,
    its ``comm_hang`` is the one hang alert (it fires on this signal at once and carries these ranks as
    ``inspector_lagging``), so this rule stays quiet: one incident per cause."""

    name = "collective_hang"

    def evaluate(self, state: LiveState, now_ns: int) -> Iterator[Condition]:
        ras_watched = {
            job.cluster
            for job in state.jobs.live()
            if any(c.op_total is not None for c in job.comms.values())
        }
        for cluster in list(state.stragglers.hang_finders):
            hangs = state.stragglers.hangs(cluster, now_ns)
            if not hangs or cluster in ras_watched:
                continue
            rows = lagging_evidence(hangs)
            procs = list(dict.fromkeys((str(r["hostname"]), int(str(r["pid"]))) for r in rows))
            hosts = sorted({host for host, _ in procs})
            first = hangs[0]
            rank = first.lagging[0]
            who = ", ".join(f"{host} pid {pid}" for host, pid in procs[:4]) + (
                " ..." if len(procs) > 4 else ""
            )
            text = (f"collective hang: {who} went silent behind {'their' if len(procs) > 1 else 'its'} peers; "
                    f"{first.comm} {first.collective}: rank {rank.rank} last reported #{rank.coll_sn}, its peers "
                    f"#{first.peers_sn}, nothing since for {first.stalled_s:.0f} s"
                    + (f" ({len(hangs) - 1} more stalled communicator collectives)" if len(hangs) > 1 else ""))  # fmt: skip
            yield Condition(
                rule=self.name,
                severity="critical",
                cluster=cluster,
                node=(node_of(state, cluster, hosts[0]) or hosts[0]) if len(hosts) == 1 else None,
                summary=text,
                evidence={
                    "comm": first.comm,
                    "collective": first.collective,
                    "lagging_ranks": rows,
                    "nodes": hosts,
                    "stalled_s": round(first.stalled_s, 1),
                },
            )


def summary(f: Finding, notes: list[str]) -> str:
    """One line: who, how much, what it costs, and the corroborating signals."""
    where = f"{f.hostname}" + (f" pid {f.pid}" if f.pid is not None else "")
    if f.kind == "communication":
        text = f"communication straggler on {where}: {len(f.comms)} cross-node comms transfer {f.slowdown:.2f}x slower"
    else:
        text = f"compute straggler on {where}: collectives {f.slowdown:.2f}x slower, costs {f.cost:.0%} of job time"
        if f.duty_cycle < 0.75:
            text += f" (intermittent: {f.burst_slowdown:.2f}x in bursts, {f.duty_cycle:.0%} of the time)"
    text += f"; lateness {f.z:.0f} robust sd"
    return text + (f"; {'; '.join(notes[:3])}" if notes else "")
