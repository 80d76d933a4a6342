"""Online straggler analysis: a live-state tracker that keeps recent Inspector records and runs the one engine
(:mod:`aggregator.analysis.stragglers`) on tick, and the ``straggler`` alert rule that reports its findings.

Scoring happens every ``evaluate_every_s`` over the retained windows, never per message, so ingest stays fast; in the
aggregator it runs on a worker thread (``background=True``) and its result is picked up by a later tick, so the event
loop never waits for it. Records are kept by receipt time: when a job stops writing, its records age out and its alerts resolve. GPU and NIC samples of
the same node are kept (latest per device) to corroborate each finding.
"""

from __future__ import annotations

import logging
import statistics
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from aggregator.alerts import Condition
from aggregator.analysis.gpu_probe import gpu_evidence
from aggregator.analysis.stragglers import Finding, StragglerEngine, StragglerParams
from aggregator.state import NS, LiveState
from aggregator.timefmt import iso
from ranksight.config import StragglerSettings
from schemas.envelope import Envelope
from schemas.records import GpuRecord, InspectorRecord, NicRecord

log = logging.getLogger(__name__)


@dataclass
class ClusterFindings:
    findings: list[Finding] = field(default_factory=list)
    records: int = 0
    capture_model: str = "ring"
    evaluated_ns: int = 0


class StragglerTracker:
    kinds = frozenset({"inspector", "gpu", "nic"})

    def __init__(self, settings: StragglerSettings | None = None) -> None:
        self.records: deque[tuple[int, str, InspectorRecord]] = deque()
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
        self.params = StragglerParams(window_s=settings.window_s, confirm_windows=settings.confirm_windows)
        self.records = deque(self.records, maxlen=settings.max_records)

    def observe(self, env: Envelope, recv_ns: int) -> None:
        if env.kind == "inspector":
            self.records.extend((recv_ns, env.cluster, rec) for rec in env.records)
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
        horizon = now_ns - int(self.settings.retain_windows * self.settings.window_s * NS)
        while self.records and self.records[0][0] < horizon:
            self.records.popleft()
        snapshot = list(self.records)
        # The first run (the replay at start) is inline: a rule evaluated before it would see no findings and
        # resolve alerts that are still true, then fire them again.
        first, self._evaluated_once = not self._evaluated_once, True
        if self._executor is None or first:
            self._set_findings(self._analyze(snapshot, now_ns))
        else:
            self._running = self._executor.submit(self._analyze, snapshot, now_ns)

    def _set_findings(self, clusters: dict[str, ClusterFindings]) -> None:
        self.clusters = clusters
        for cluster, result in clusters.items():
            self._history += [{"evaluated_at": iso(result.evaluated_ns), "cluster": cluster,
                               "capture_model": result.capture_model, "records": result.records,
                               **{k: v for k, v in f.as_dict().items() if k != "evidence"},
                               "evidence": f.evidence} for f in result.findings]  # fmt: skip

    def take_history(self) -> list[dict[str, object]]:
        """Findings of the evaluations since the last call, for the ``straggler_finding_history`` table."""
        rows, self._history = self._history, []
        return rows

    def _analyze(
        self, records: list[tuple[int, str, InspectorRecord]], now_ns: int
    ) -> dict[str, ClusterFindings]:
        engines: dict[str, StragglerEngine] = {}
        for _, cluster, rec in records:
            engine = engines.get(cluster)
            if engine is None:
                engine = engines[cluster] = StragglerEngine(self.params)
            engine.add(rec)
        out = {}
        for cluster, engine in engines.items():
            try:
                result = engine.analyze()
            except Exception:  # a bug or an input we did not foresee must never stop the aggregator's ticks
                log.exception(
                    "straggler analysis of cluster %s failed; keeping its previous findings", cluster
                )
                out[cluster] = self.clusters.get(cluster, ClusterFindings(evaluated_ns=now_ns))
                continue
            out[cluster] = ClusterFindings(result.stragglers, result.records, result.capture_model, now_ns)
        return out

    def corroboration(self, cluster: str, hostname: str) -> list[str]:
        """What GPU and NIC samples of the node say (the node name is the hostname unless configured otherwise)."""
        notes = []
        gpus = {key[2]: g for key, g in self.gpus.items() if key[0] == cluster}
        mine = {key[2]: g for key, g in self.gpus.items() if key[0] == cluster and key[1] == hostname}
        for index, gpu in sorted(mine.items()):
            if gpu.throttled:
                notes.append(f"GPU {index} throttled ({', '.join(gpu.throttle_reasons) or 'reason unknown'})")
        clocks = [g.sclk_hz for g in gpus.values() if g.sclk_hz]
        if len(clocks) >= 3:
            typical = statistics.median(clocks)
            notes += [f"GPU {i} clock {g.sclk_hz / 1e6:.0f} MHz vs {typical / 1e6:.0f} MHz typical"
                      for i, g in sorted(mine.items()) if g.sclk_hz and g.sclk_hz < 0.9 * typical]  # fmt: skip
        for (c, node, name), nic in sorted(self.nics.items()):
            if c == cluster and node == hostname and nic.state and nic.state.upper() not in ("ACTIVE", "UP"):
                notes.append(f"NIC {name} is {nic.state}")
        return notes


class StragglerRule:
    name = "straggler"

    def evaluate(self, state: LiveState, now_ns: int) -> Iterator[Condition]:
        tracker = state.stragglers
        for cluster, result in tracker.clusters.items():
            for f in result.findings:
                notes = tracker.corroboration(cluster, f.hostname)
                notes += [f"GPU {g['gpu']} active probe: {x['metric']} {x.get('drop', 0):.0%} below its {x.get('basis')}"
                          for g in gpu_evidence(state, cluster, f.hostname) for x in g["findings"]]  # fmt: skip
                where = f"{f.hostname}" + (f" pid {f.pid}" if f.pid is not None else "")
                yield Condition(
                    rule=self.name,
                    severity="warning" if f.slowdown < 1.5 else "critical",
                    cluster=cluster,
                    node=f.hostname,
                    key=f"{f.kind}:{f.pid}",  # comm and rank stay in the evidence: the fingerprint must not move
                    entity=f"pid {f.pid}" if f.pid is not None else "node",
                    summary=f"{f.kind} straggler on {where}: collectives {f.slowdown:.2f}x slower",
                    evidence={**f.as_dict(), "corroboration": notes},
                )
