"""The one straggler engine (design §6): pure, used online by the aggregator and offline by ``ranksight analyze``.

Why not "the rank with the lowest bandwidth": a rank's ``exec_time`` includes its wait for the last rank to arrive, so a
late rank (compute straggler) shows the *shortest* time of its group while its peers look slow.

Method, over time windows of ``dump_ts_us``:

1. Observations compare like with like. Ring model: one observation per operation ``(comm, coll, coll_sn)`` (size is
   part of the key). Sampled model (``coll_sn`` has gaps): one observation per ``(comm, coll, size)`` and window, each
   rank represented by the median of its samples.
2. Compute: in each observation a rank's lateness is ``(median - own) / spread`` (spread = 1.4826 x MAD, floored at a
   fraction of the median so that a quiet group does not turn microseconds into big scores), clipped so that one spike
   cannot dominate. A rank whose mean lateness in a window passes ``z_threshold`` is flagged in that window.
3. Communication: the transfer time of an observation is its shortest exec time (the last arriver waits for nobody).
   A cross-node comm whose transfer time is well above comms of the same shape, or above its own history, is slow in
   that window; the nodes common to the slow comms and not to the fast ones (greedy cover) are the culprits. Processes
   in a slow comm are not called compute stragglers in that window: their lateness is explained by the slow comm.
4. Confirmation: a finding needs ``confirm_windows`` consecutive flagged windows, so warm-up and noise raise nothing.
   A host where most processes are compute stragglers is reported once, as a node (``pid`` None).

The slowdown factor is what the finding costs: for compute, the step period over the period minus the time the peers
wait for the late rank per step (the op rate of a comm gives its step period, in both capture models); for
communication, the slow comms' transfer time over the reference.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from schemas.records import InspectorRecord

Kind = Literal["compute", "communication"]
Proc = tuple[str, int]  # (hostname, pid): rank numbers are per communicator, a process is not


@dataclass(frozen=True)
class StragglerParams:
    window_s: float = 10.0
    confirm_windows: int = 2
    z_threshold: float = 2.0
    # Sampled records pool different operations (step-to-step jitter, intermittent delays), so there a rank is
    # judged by how often it is among the fastest decile of its comm's samples: a binomial z-score against 10%.
    z_threshold_sampled: float = 3.0
    z_clip: float = 6.0
    spread_floor: float = 0.02  # fraction of the group median
    min_group: int = 3  # ranks needed to judge one against the others
    min_obs: int = 3  # observations of a rank in a window before it can be flagged
    comm_slow_ratio: float = 1.3
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
class _Comm:
    label: str  # comm_name when the plugin gives one, else the hash id
    members: dict[int, Proc] = field(default_factory=dict)

    @property
    def hosts(self) -> set[str]:
        return {host for host, _ in self.members.values()}


@dataclass
class _RankWindow:
    z_sum: float = 0.0
    n: int = 0
    delays: list[float] = field(default_factory=list)  # µs the peers waited for this rank, when flagged
    threshold: float = 0.0
    sampled: bool = False
    fastest: int = 0  # sampled model: samples in the fastest decile of the comm

    @property
    def late(self) -> float:
        if not self.n:
            return 0.0
        if self.sampled:
            return (self.fastest - 0.1 * self.n) / (0.09 * self.n) ** 0.5
        return self.z_sum / self.n


class _Collector:
    """Accumulates records into observations; nothing is judged until :meth:`analyze`."""

    def __init__(self, params: StragglerParams) -> None:
        self.p = params
        self.window_us = max(1, int(params.window_s * 1e6))
        self.records = 0
        self.ring = self.sampled = 0
        self.comms: dict[str, _Comm] = {}
        # ring: (comm, op, size, sn) -> [(rank, exec_us, dump_ts_us)]
        self.ops: dict[tuple[str, str, int, int], list[tuple[int, float, int]]] = defaultdict(list)
        # sampled: (comm, op, size, window) -> rank -> [exec_us]
        self.samples: dict[tuple[str, str, int, int], dict[int, list[float]]] = defaultdict(
            lambda: defaultdict(list)
        )
        self.p2p_ops: set[tuple[str, int, str, int]] = set()
        self.sampled_ops: set[tuple[str, str, int]] = set()
        self.bw_mismatches = 0
        # (comm, op, window) -> [lowest sn, highest sn]: the op rate gives the step period (both capture models)
        self.sn_span: dict[tuple[str, str, int], list[int]] = {}

    def add(self, rec: InspectorRecord) -> None:
        self.records += 1
        if rec.capture_model == "ring":
            self.ring += 1
        else:
            self.sampled += 1
        self.bw_mismatches += rec.bw_mismatch
        comm = self.comms.get(rec.comm_id)
        if comm is None:
            comm = self.comms[rec.comm_id] = _Comm(rec.comm_name or rec.comm_id)
        comm.members[rec.rank] = (rec.hostname, rec.pid)
        if rec.op_kind == "p2p":  # p2p_sn is per process: not comparable across ranks
            self.p2p_ops.add((rec.comm_id, rec.rank, rec.op, rec.sn))
            return
        if rec.exec_time_us is None or rec.exec_time_us <= 0:
            return
        span_key = (rec.comm_id, rec.op, rec.dump_ts_us // self.window_us)
        span = self.sn_span.get(span_key)
        if span is None:
            self.sn_span[span_key] = [rec.sn, rec.sn]
        else:
            span[0], span[1] = min(span[0], rec.sn), max(span[1], rec.sn)
        if rec.capture_model == "ring":
            self.ops[(rec.comm_id, rec.op, rec.msg_size_bytes, rec.sn)].append(
                (rec.rank, rec.exec_time_us, rec.dump_ts_us)
            )
        else:
            window = rec.dump_ts_us // self.window_us
            self.sampled_ops.add((rec.comm_id, rec.op, rec.sn))
            self.samples[(rec.comm_id, rec.op, rec.msg_size_bytes, window)][rec.rank].append(rec.exec_time_us)

    def observations(self) -> Iterable[tuple[int, str, str, int, dict[int, list[float]], bool]]:
        """(window, comm, op, size, rank -> exec times, sampled?) for every comparable group: one operation (ring
        model), or every sample of one (comm, coll, size) in a window (sampled model)."""
        for (comm, op, size, _sn), entries in self.ops.items():
            window = min(e[2] for e in entries) // self.window_us
            yield window, comm, op, size, {rank: [t] for rank, t, _ in entries}, False
        for (comm, op, size, window), per_rank in self.samples.items():
            yield window, comm, op, size, per_rank, True

    @property
    def operations(self) -> int:
        return len(self.ops) + len(self.p2p_ops) + len(self.sampled_ops)

    def periods_us(self) -> dict[str, float]:
        """Median interval between consecutive ops of each comm (one op per step per comm in most jobs)."""
        per_comm: dict[str, list[float]] = defaultdict(list)
        for (comm, _op, _window), (lo, hi) in self.sn_span.items():
            if hi > lo:
                per_comm[comm].append(self.window_us / (hi - lo + 1))
        return {comm: statistics.median(v) for comm, v in per_comm.items()}

    @property
    def capture_model(self) -> Literal["ring", "sampled", "mixed"]:
        if self.ring and self.sampled:
            return "mixed"
        return "ring" if self.ring else "sampled"


def _robust(values: list[float], floor_frac: float) -> tuple[float, float]:
    med = statistics.median(values)
    mad = statistics.median(abs(v - med) for v in values)
    return med, max(1.4826 * mad, floor_frac * med, 1.0)


def _consecutive_runs(windows: list[int]) -> int:
    """Length of the longest run of consecutive window indices."""
    best = run = 0
    prev = None
    for w in sorted(windows):
        run = run + 1 if prev is not None and w == prev + 1 else 1
        best, prev = max(best, run), w
    return best


class StragglerEngine:
    """Feed records with :meth:`add`, then :meth:`analyze`. One instance per analysis (offline) or per tick window
    set (online); holds no clock and does no I/O."""

    def __init__(self, params: StragglerParams | None = None) -> None:
        self.params = params or StragglerParams()
        self._c = _Collector(self.params)

    def add(self, rec: InspectorRecord) -> None:
        self._c.add(rec)

    def extend(self, records: Iterable[InspectorRecord]) -> StragglerEngine:
        for rec in records:
            self._c.add(rec)
        return self

    def analyze(self) -> Analysis:
        c, p = self._c, self.params
        rank_windows: dict[tuple[int, str, int], _RankWindow] = defaultdict(_RankWindow)
        transfer: dict[tuple[int, str, str, int], list[float]] = defaultdict(list)
        for window, comm, op, size, per_rank, sampled in c.observations():
            threshold = p.z_threshold_sampled if sampled else p.z_threshold
            pooled = [t for ts in per_rank.values() for t in ts]
            # the transfer time: the last rank to arrive waits for nobody, so its time is the shortest
            transfer[(window, comm, op, size)].append(min(pooled))
            if len(per_rank) < p.min_group:
                continue
            med, spread = _robust(pooled, p.spread_floor)
            fast_decile = sorted(pooled)[len(pooled) // 10] if sampled else 0.0
            for rank, ts in per_rank.items():
                rw = rank_windows[(window, comm, rank)]
                rw.threshold, rw.sampled = threshold, sampled
                for t in ts:
                    rw.z_sum += max(-p.z_clip, min(p.z_clip, (med - t) / spread))
                    rw.n += 1
                    if sampled and t <= fast_decile:
                        rw.fastest += 1
                        rw.delays.append(med - t)
                    elif not sampled and (med - t) / spread >= threshold:
                        rw.delays.append(med - t)
        slow_comms, node_flags = self._communication(transfer)
        findings = self._compute_findings(rank_windows, slow_comms)
        findings += self._communication_findings(node_flags)
        for f in findings:  # window indices -> time span
            f.first_ts_us, f.last_ts_us = f.first_ts_us * c.window_us, (f.last_ts_us + 1) * c.window_us
        findings.sort(key=lambda f: (-f.confidence * f.slowdown, f.hostname, f.pid or 0))
        return Analysis(c.records, c.operations, c.capture_model, findings, bw_mismatches=c.bw_mismatches)

    # -- communication ------------------------------------------------------------------------------------------
    def _communication(
        self, transfer: dict[tuple[int, str, str, int], list[float]]
    ) -> tuple[dict[int, set[str]], dict[str, dict[int, tuple[float, list[str]]]]]:
        """Slow comms per window, and per culprit node: window -> (slowdown, slow comm labels)."""
        c, p = self._c, self.params
        value = {key: statistics.median(v) for key, v in transfer.items()}
        by_shape: dict[tuple[int, str, int, int, int], list[tuple[str, float]]] = defaultdict(list)
        history: dict[tuple[str, str, int], list[tuple[int, float]]] = defaultdict(list)
        for (window, comm, op, size), t in value.items():
            info = c.comms[comm]
            if len(info.hosts) < 2:
                continue  # intra-node comms cannot point at a node's network
            by_shape[(window, op, size, len(info.members), len(info.hosts))].append((comm, t))
            history[(comm, op, size)].append((window, t))
        ratios: dict[int, dict[str, float]] = defaultdict(dict)  # window -> comm -> worst ratio
        for (window, *_), members in by_shape.items():
            # lower quartile: the healthy comms of the shape, even when several of them are slow
            ref = statistics.quantiles([t for _, t in members], n=4)[0] if len(members) >= 3 else None
            for comm, t in members:
                ratio = t / ref if ref else 1.0
                ratios[window][comm] = max(ratios[window].get(comm, 0.0), ratio)
        for (comm, _op, _size), series in history.items():
            series.sort()
            for i, (window, t) in enumerate(series):
                past = [v for _, v in series[max(0, i - 20) : i]]
                if len(past) >= 2:
                    ref = statistics.quantiles(past, n=4)[0] if len(past) >= 4 else min(past)
                    ratios[window][comm] = max(ratios[window].get(comm, 0.0), t / ref)
        slow_comms: dict[int, set[str]] = {}
        node_flags: dict[str, dict[int, tuple[float, list[str]]]] = defaultdict(dict)
        for window, comm_ratios in ratios.items():
            slow = {comm for comm, r in comm_ratios.items() if r >= p.comm_slow_ratio}
            fast = set(comm_ratios) - slow
            slow_comms[window] = slow
            if not slow or not fast:
                continue  # everything slow (or nothing): no node to single out
            for host in self._localize(slow, fast):
                through = [comm for comm in slow if host in c.comms[comm].hosts]
                slowdown = statistics.median(comm_ratios[comm] for comm in through)
                node_flags[host][window] = (slowdown, sorted(c.comms[comm].label for comm in through))
        return slow_comms, node_flags

    def _localize(self, slow: set[str], fast: set[str]) -> list[str]:
        """Nodes common to the slow comms and (nearly) absent from the fast ones: a greedy set cover."""
        comms = self._c.comms
        slow_by_host: dict[str, set[str]] = defaultdict(set)
        fast_by_host: dict[str, int] = defaultdict(int)
        for comm in slow:
            for host in comms[comm].hosts:
                slow_by_host[host].add(comm)
        for comm in fast:
            for host in comms[comm].hosts:
                fast_by_host[host] += 1
        candidates = {
            h: s for h, s in slow_by_host.items() if fast_by_host[h] <= 0.2 * (len(s) + fast_by_host[h])
        }
        picked: list[str] = []
        uncovered = set(slow)
        while uncovered:
            best = max(candidates, key=lambda h: (len(candidates[h] & uncovered), -fast_by_host[h], h),
                       default=None)  # fmt: skip
            if best is None or not candidates[best] & uncovered:
                break
            picked.append(best)
            uncovered -= candidates.pop(best)
        # The other end of a slow link has exactly the same slow comms: report it too.
        twins = [
            h for h, s in candidates.items() if any(s == slow_by_host[x] for x in picked) and len(s) >= 2
        ]
        return picked + twins

    def _communication_findings(
        self, node_flags: dict[str, dict[int, tuple[float, list[str]]]]
    ) -> list[Finding]:
        p = self.params
        out = []
        for host, windows in node_flags.items():
            if _consecutive_runs(list(windows)) < p.confirm_windows:
                continue
            first, last = min(windows), max(windows)
            slowdown = statistics.median(s for s, _ in windows.values())
            comms = sorted({label for _, labels in windows.values() for label in labels})
            evidence = (
                f"{len(comms)} cross-node comm(s) through {host} ran {slowdown:.2f}x slower than comms of the "
                f"same shape or their own history in {len(windows)} window(s): {', '.join(comms[:5])}"
                + (" ..." if len(comms) > 5 else "")
            )
            out.append(Finding(host, None, "communication", comms[0] if len(comms) == 1 else None, None,
                               slowdown, len(windows) / (last - first + 1), evidence, first, last))  # fmt: skip
        return out

    # -- compute ------------------------------------------------------------------------------------------------
    def _compute_findings(
        self, rank_windows: dict[tuple[int, str, int], _RankWindow], slow_comms: dict[int, set[str]]
    ) -> list[Finding]:
        c, p = self._c, self.params
        late_in = {key for key, rw in rank_windows.items() if rw.n >= p.min_obs and rw.late >= rw.threshold}
        late_ranks: dict[tuple[int, str], int] = defaultdict(int)
        for window, comm, _rank in late_in:
            late_ranks[(window, comm)] += 1
        member_of: dict[tuple[int, Proc], list[tuple[str, int]]] = defaultdict(list)
        for window, comm, rank in rank_windows:
            member_of[(window, c.comms[comm].members[rank])].append((comm, rank))
        explained: dict[int, set[Proc]] = defaultdict(set)
        for window, comms in slow_comms.items():  # lateness that a slow comm explains
            for comm in comms:
                explained[window].update(c.comms[comm].members.values())
        flagged: dict[Proc, dict[int, list[tuple[str, int, _RankWindow]]]] = defaultdict(dict)
        seen: dict[Proc, set[int]] = defaultdict(set)
        for (window, proc), memberships in member_of.items():
            seen[proc].add(window)
            late = [(comm, rank) for comm, rank in memberships if (window, comm, rank) in late_in]
            # A victim: it waited for a late peer in one comm, and so arrives late at its next comms.
            victim = any(
                (window, comm, rank) not in late_in and late_ranks[(window, comm)] > 0
                for comm, rank in memberships
            )
            if late and not victim and proc not in explained[window]:
                flagged[proc][window] = [
                    (comm, rank, rank_windows[(window, comm, rank)]) for comm, rank in late
                ]
        confirmed = {
            proc: w for proc, w in flagged.items() if _consecutive_runs(list(w)) >= p.confirm_windows
        }
        procs_by_host: dict[str, set[Proc]] = defaultdict(set)
        for proc in seen:
            procs_by_host[proc[0]].add(proc)
        by_host: dict[str, list[Proc]] = defaultdict(list)
        for proc in confirmed:
            by_host[proc[0]].append(proc)
        periods = c.periods_us()
        out: list[Finding] = []
        for host, procs in by_host.items():
            parts = [self._proc_finding(proc, confirmed[proc], seen[proc], periods) for proc in procs]
            total = len(procs_by_host[host])
            if len(procs) >= 2 and len(procs) >= p.node_share * total:
                out.append(self._node_finding(host, parts, total))
            else:
                out += parts
        return out

    def _proc_finding(
        self,
        proc: Proc,
        windows: dict[int, list[tuple[str, int, _RankWindow]]],
        seen: set[int],
        periods: dict[str, float],
    ) -> Finding:
        c = self._c
        entries = [e for es in windows.values() for e in es]
        per_comm: dict[str, int] = defaultdict(int)
        for comm, _, rw in entries:
            per_comm[comm] += rw.n
        top = max(per_comm, key=lambda k: per_comm[k])
        rank = next(r for comm, r, _ in entries if comm == top)
        delays = [d for comm, _, rw in entries if comm == top for d in rw.delays]
        delay = statistics.median(delays) if delays else 0.0
        z = statistics.mean(rw.late for _, _, rw in entries)
        first, last = min(windows), max(windows)
        active = [w for w in seen if first <= w <= last]
        # The job loses ``delay`` per step: period / (period - delay) is the slowdown this rank causes.
        period = periods.get(top)
        slowdown = period / max(period - delay, 0.1 * period) if period else 1.0
        info = c.comms[top]
        evidence = (
            f"arrives late: shortest exec time of its group (mean lateness {z:.1f} robust sd) in {len(windows)} of "
            f"{len(active)} windows; its {len(per_comm)} comm(s) wait {delay / 1000:.2f} ms for it per op"
            + (f" (step period {period / 1000:.1f} ms)" if period else "")
            + f"; rank {rank}/{len(info.members)} of {info.label}"
        )
        return Finding(proc[0], proc[1], "compute", info.label, rank, slowdown, len(windows) / max(1, len(active)),
                       evidence, first, last)  # fmt: skip

    @staticmethod
    def _node_finding(host: str, parts: list[Finding], total: int) -> Finding:
        evidence = (
            f"{len(parts)} of {total} processes on {host} arrive late in their collectives (node-wide compute "
            f"slowness: CPU, power or thermal); e.g. pid {parts[0].pid}: {parts[0].evidence}"
        )
        return Finding(host, None, "compute", None, None, statistics.median(f.slowdown for f in parts),
                       statistics.mean(f.confidence for f in parts), evidence,
                       min(f.first_ts_us for f in parts), max(f.last_ts_us for f in parts))  # fmt: skip


def analyze_records(records: Iterable[InspectorRecord], params: StragglerParams | None = None) -> Analysis:
    return StragglerEngine(params).extend(records).analyze()
