"""What the straggler engine reports (:class:`Finding`, :class:`Analysis`), the parameters it judges with, and a
finding on its way to confirmation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Kind = Literal["compute", "communication"]
Pattern = Literal["steady", "intermittent", "undetermined"]
Proc = tuple[str, int]  # (hostname, pid): rank numbers are per communicator, a process is not


@dataclass(frozen=True)
class StragglerParams:
    window_s: float = 6.0  # sliding evaluation horizon
    slice_s: float = 0.5  # records are summed per slice
    judge_every: int = 1  # online, the horizon is judged at every this many slices (offline at every slice)
    confirm_windows: int = 3  # most consecutive flagged evaluations a weak finding needs
    catch_up_windows: int = 4  # online, late records and gaps are judged again this many horizons back
    clock_ahead_s: float = 5.0  # online, records dumped further past clock_us are not judged
    evidence_z: float = 12.0  # summed robust z that confirms a finding
    z_threshold: float = 4.0
    min_excess: float = 0.05  # compute share above the job's median (as a ratio) to flag a process
    min_cost: float = 0.02  # share of the job's time a compute finding must cost
    spread_floor: float = 0.01  # fraction of the median compute share
    min_ops: int = (
        20  # ops of a process in the horizon before it is judged (a one-step hiccup is not a trend)
    )
    min_group: int = 4  # processes of a job needed to judge one against the others
    min_steps: float = 3.0  # steps the excess must span (with long steps, one hiccup fills several slices)
    min_window_steps: float = 60.0  # steps the horizon must hold (long steps stretch it beyond window_s)
    comm_slow_ratio: float = 1.3
    pool_samples: int = 3  # sampled: dump ticks per pool of the compute-share series
    # sampled: dump ticks the horizon holds (one sample per comm each). The collective carrying a straggler's waits is
    # often the rarest sampled (the slot holds a communicator's last op): with 24, a 1.1-1.2x straggler of the hybrid
    # job had too few samples of it and was missed in 2 of 5 runs
    sampled_window_samples: int = 48
    sampled_max_window_s: float = 300.0  # sampled: the horizon spans at most this much dump time
    confirm_share: float = 0.5  # share of the horizon a weak finding must stay flagged before it is confirmed
    pattern_memory_windows: int = 8  # horizons of a suspect's pools kept to tell steady from intermittent
    max_stretch: int = (
        20  # the horizon is stretched (long steps, long dump intervals) to at most this many windows
    )
    # a compute finding is flagged only where its slow pools would come by chance (its peers' rate of as slow pools, times
    # the stage's processes) at most this often
    hiccup_chance: float = 1e-3
    node_share: float = 0.5  # share of a host's processes flagged before the host itself is reported


@dataclass
class Finding:
    hostname: str
    pid: int | None
    kind: Kind
    comm: str | None
    rank: int | None
    slowdown: float
    confidence: float
    evidence: str
    first_ts_us: int = 0
    last_ts_us: int = 0
    cost: float = 0.0  # share of the job's time lost to this finding
    duty_cycle: float = 1.0  # share of the time the fault is active (intermittent < 1)
    burst_slowdown: float = 1.0
    z: float = 0.0
    comms: list[dict[str, object]] = field(default_factory=list)  # communication: slow comms with their times
    nodes: list[str] = field(default_factory=list)
    comm_ids: list[str] = field(default_factory=list)  # its communicators (RAS knows a job's by these hashes)
    # steady / intermittent / undetermined, judged on pools of pattern_resolution_s (faster alternation averages out)
    pattern: Pattern = "undetermined"  # (communication findings are not judged for it)
    pattern_resolution_s: float = 0.0
    pattern_note: str = ""  # the clause of ``evidence`` that states the pattern (a process's own finding)
    coverage: dict[str, object] = field(
        default_factory=dict
    )  # what the data covered (Finding.as_dict documents it)
    # compute: how likely its slow pools come by chance, as often as its peers' are as slow, on one of the processes
    # compared (0: not weighed, or steady); flagged only at most hiccup_chance
    chance: float = 0.0

    @property
    def key(self) -> tuple[str, int | None, Kind]:
        return self.hostname, self.pid, self.kind

    def as_dict(self) -> dict[str, object]:
        return {
            "hostname": self.hostname,
            "pid": self.pid,
            "kind": self.kind,
            "comm": self.comm,
            "rank": self.rank,
            "slowdown": round(self.slowdown, 3),
            "confidence": round(self.confidence, 3),
            "evidence": self.evidence,
            "cost": round(self.cost, 4),
            "duty_cycle": round(self.duty_cycle, 3),
            "burst_slowdown": round(self.burst_slowdown, 3),
            "lateness_z": round(self.z, 1),
            "slow_comms": self.comms,
            "pattern": self.pattern,
            "pattern_resolution_s": round(self.pattern_resolution_s, 3),
            "coverage": self.coverage,
        }


@dataclass
class Analysis:
    records: int
    operations: int
    capture_model: Literal["ring", "sampled", "mixed"]
    stragglers: list[Finding]
    bad_lines: int = 0
    bw_mismatches: int = 0

    def as_dict(self) -> dict[str, object]:
        return {
            "records": self.records,
            "operations": self.operations,
            "capture_model": self.capture_model,
            "stragglers": [f.as_dict() for f in self.stragglers],
            "bad_lines": self.bad_lines,
        }


@dataclass
class Candidate:
    """A finding being confirmed: evidence added per consecutive flagged evaluation."""

    finding: Finding
    evidence: float = 0.0
    evals: int = 0
    confirmed: bool = False
    flagged_evals: int = 0
    seen_evals: int = 0


def ranked(findings: list[Finding]) -> list[Finding]:
    """Worst first; a process's compute finding is folded into its node's when the whole node is reported."""
    nodes = {f.hostname for f in findings if f.kind == "compute" and f.pid is None}
    kept = [f for f in findings if not (f.kind == "compute" and f.pid is not None and f.hostname in nodes)]
    return sorted(kept, key=lambda f: (-f.confidence * f.slowdown, f.hostname, f.pid or 0))
