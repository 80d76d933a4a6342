"""Rules on a job's RAS diagnostics (NCCL 2.31+, ``ras_diagnostics`` records): one rule per inconsistency class, each
alert naming the hosts that differ (resolved by the agent from a JSON status; the Xid/SXid check names its hosts
itself), one alert per job, rule and communicator (Xid: per host).

A run happens once per job, so a finding stands for the job's lifetime (until the job ends or a later run no longer
reports it). For the NCCL environment, the ranks that differ are those outside the largest group of equal values.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import ClassVar

from ranksight.aggregator.alerts import Condition, Rule, RuleDoc, Severity
from ranksight.aggregator.analysis.ras import node_of
from ranksight.aggregator.state import LiveState
from ranksight.aggregator.state.jobs import JobState
from ranksight.schemas.records.ras import RasDiagnosticFinding

MAX_NAMED = 8  # hosts named in a summary; the evidence lists them all


@dataclass
class DiagnosticsRule:
    # hold-down: the diagnostics run once per job, so a finding stands until the job ends
    for_s: ClassVar[float] = 0.0
    clear_s: ClassVar[float] = 60.0
    name: str
    kinds: frozenset[str]
    severity: Severity
    what: str  # "CUDA or NVIDIA driver versions differ", for the summary

    @property
    def doc(self) -> RuleDoc:
        return RuleDoc(self.severity, f"the job's RAS diagnostics (NCCL 2.31+) report it: {self.what}; names the "
                       "hosts that differ", "see RAS")  # fmt: skip

    def evaluate(self, state: LiveState, now_ns: int) -> Iterator[Condition]:
        for job in state.jobs.current():
            report = job.diagnostics
            if report is None:
                continue
            groups: dict[str, list[RasDiagnosticFinding]] = {}
            for f in report.findings:
                if f.kind in self.kinds:
                    key = (f.hosts[0] if f.kind in ("xid", "sxid") and f.hosts else f.comm) or ""
                    groups.setdefault(key, []).append(f)
            for key, findings in sorted(groups.items()):
                yield self._condition(state, job, key, findings)

    def _condition(self, state: LiveState, job: JobState, key: str,
                   findings: list[RasDiagnosticFinding]) -> Condition:  # fmt: skip
        differing = _differing(findings)
        hosts = sorted({h for f in differing for h in f.hosts})
        ranks = sorted({r for f in differing for r in f.ranks})
        where = (", ".join(hosts[:MAX_NAMED]) + (f" and {len(hosts) - MAX_NAMED} more" if len(hosts) > MAX_NAMED
                 else "")) if hosts else f"ranks {ranks} of communicator {key}"  # fmt: skip
        nodes = {node_of(state, job.cluster, h) for h in hosts}
        node = next(iter(nodes)) if len(nodes) == 1 else None
        comm = findings[0].comm
        return Condition(self.name, self.severity, job.cluster, f"job {job.job_id}: {self.what} on {where}",
                         node=node, job=job.job_id, comm=comm, key=key if comm is None else "",
                         evidence={"hosts": hosts, "ranks": ranks, "comm": comm, "lines": [f.text for f in findings],
                                   "reported_by": f"{job.diagnostics.host}:{job.diagnostics.pid}"
                                   if job.diagnostics else None})  # fmt: skip


def _differing(findings: list[RasDiagnosticFinding]) -> list[RasDiagnosticFinding]:
    """The findings whose ranks are the odd ones out: for the NCCL environment's per-value lines, every group but the
    largest; otherwise every finding (each names only the ranks or hosts that differ)."""
    values = [f for f in findings if f.kind == "nccl_env" and f.ranks]
    if len(values) < 2:
        return [f for f in findings if f.ranks or f.hosts]
    largest = max(values, key=lambda f: f.ranks_total)
    return [f for f in values if f is not largest]


def diagnostics_rules() -> list[Rule]:
    return [
        DiagnosticsRule("ras_diag_versions", frozenset({"cuda_driver", "nvidia_driver"}), "warning",
                        "CUDA or NVIDIA driver versions differ"),
        DiagnosticsRule("ras_diag_gpu_inventory", frozenset({"gpu_count", "gpu_model"}), "warning",
                        "GPU count or model differs"),
        DiagnosticsRule("ras_diag_xid", frozenset({"xid", "sxid"}), "critical", "Xid/SXid errors in the kernel log"),
        DiagnosticsRule("ras_diag_nvlink", frozenset({"nvlink_count", "nvlink_inactive", "nvlink_speed"}), "warning",
                        "NVLinks down, missing or slower"),
        DiagnosticsRule("ras_diag_nccl_env", frozenset({"nccl_env"}), "warning", "NCCL_* environment differs"),
        DiagnosticsRule("ras_diag_ecc", frozenset({"ecc_uncorrected", "ecc_corrected"}), "critical",
                        "volatile ECC errors"),
    ]  # fmt: skip
