"""The ``straggler`` and ``collective_hang`` rules over :class:`aggregator.state.stragglers.StragglerTracker`.

Each straggler finding is corroborated by the live GPU and NIC state of its node (the same device state the hardware
rules read), active GPU probes and, for communication stragglers, link probes; its coverage cites the Inspector drop
counters of its processes (``ring_drops``, from the plugins' dump markers) where they are known.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterator, Mapping
from typing import cast

from ranksight.aggregator.alerts import Condition, RuleDoc
from ranksight.aggregator.analysis.gpu_probe import gpu_evidence
from ranksight.aggregator.analysis.ras import LAG_POLLS, node_of
from ranksight.aggregator.models.hangs import Hang, comm_hash, lagging_evidence
from ranksight.aggregator.models.straggler.findings import Finding
from ranksight.aggregator.state import LiveState
from ranksight.aggregator.state.devices import link_up
from ranksight.aggregator.state.inspector_drops import CommDrops
from ranksight.aggregator.state.jobs import JobState
from ranksight.schemas.records import GpuRecord, InspectorMetricsRecord


def corroboration(state: LiveState, cluster: str, hostname: str) -> list[str]:
    """What the GPU and NIC samples of the node say (the node name is the hostname unless configured otherwise)."""
    notes = [note for _, note in gpu_notes(state, cluster, hostname)]
    nics = {key: dev.record for key, dev in state.nics.devices.items() if key[0] == cluster}
    speeds = [n.speed_bps for n in nics.values() if n.speed_bps]
    typical_speed = statistics.median(speeds) if speeds else None
    for (_, _, name), nic in sorted((key, nic) for key, nic in nics.items() if key[1] == hostname):
        if nic.state and not link_up(nic):
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


def gpu_notes(state: LiveState, cluster: str, hostname: str) -> list[tuple[int, str]]:
    """(GPU index, what is wrong with it) for the node's GPUs that are throttled, have uncorrectable ECC errors, or
    whose clock, power or junction temperature is off the cluster's typical value by more than 10 %."""
    notes: list[tuple[int, str]] = []
    # the typical value of a gauge is the cluster's GPUs' median (every node's: keyed by index alone, it was one node's)
    gpus = [dev.record for (c, _, _), dev in state.gpus.devices.items() if c == cluster]
    mine = {dev.record.index: dev.record for (c, node, _), dev in state.gpus.devices.items()
            if c == cluster and node == hostname}  # fmt: skip
    for index, gpu in sorted(mine.items()):
        if gpu.throttled:
            notes.append(
                (index, f"GPU {index} throttled ({', '.join(gpu.throttle_reasons) or 'reason unknown'})")
            )
        if gpu.ecc_uncorrectable:
            notes.append((index, f"GPU {index} has {gpu.ecc_uncorrectable} uncorrectable ECC errors"))
    for what, unit, scale, get in _GPU_GAUGES:
        values = [v for g in gpus if (v := get(g))]
        if len(values) < 3:
            continue
        typical = statistics.median(values)
        notes += [(i, f"GPU {i} {what} {v / scale:.0f} {unit} vs {typical / scale:.0f} {unit} typical")
                  for i, g in sorted(mine.items()) if (v := get(g)) and abs(v - typical) > 0.1 * typical]  # fmt: skip
    return notes


def gpu_of(state: LiveState, cluster: str, hostname: str, pid: int | None) -> int | None:
    """The GPU a straggling process drives: its local rank as the training client reports it (one process per GPU,
    ``LOCAL_RANK`` = the GPU), else the one GPU of its node whose samples stand out; None when neither says."""
    for rank in state.app.ranks.values():
        if (rank.cluster, rank.node, rank.pid) == (cluster, hostname, pid) and rank.local_rank is not None:
            return rank.local_rank
    odd = {index for index, _ in gpu_notes(state, cluster, hostname)}
    return odd.pop() if len(odd) == 1 else None


_GPU_GAUGES: list[tuple[str, str, float, Callable[[GpuRecord], float | None]]] = [
    ("clock", "MHz", 1e6, lambda g: g.sclk_hz),
    ("power", "W", 1.0, lambda g: g.power_w),
    ("junction temperature", "C", 1.0, lambda g: g.temperature_junction_c),
]


def _link_notes(state: LiveState, cluster: str, hostname: str) -> list[str]:
    """Active link probes from or to the node that measured below their peers' median."""
    links = [link for link in state.links.links.values() if link.cluster == cluster and link.fresh]
    speeds = [v for link in links if (v := link.record.download_bps)]
    if len(speeds) < 3:
        return []
    typical = statistics.median(speeds)
    return [f"link probe {link.src} -> {link.dst}: {v / 1e9:.1f} Gbit/s vs {typical / 1e9:.1f} typical"
            for link in links if hostname in (link.src, link.dst) and (v := link.record.download_bps)
            and v < 0.7 * typical]  # fmt: skip


def job_of(state: LiveState, cluster: str, comm_ids: list[str]) -> JobState | None:
    """The RAS-watched job whose communicators the finding's processes are in (the latest, if a hash recurs)."""
    wanted = {comm_hash(c) for c in comm_ids}
    jobs = [job for job in state.jobs.jobs.values()
            if job.cluster == cluster and any(comm_hash(h) in wanted for h in job.comms)]  # fmt: skip
    return max(jobs, key=lambda job: job.first_seen_ns, default=None)


def ras_comms(job: JobState | None, comm_ids: list[str]) -> list[dict[str, object]]:
    """The finding's communicators as the job's RAS status knows them (where the hashes match): RAS names each by its
    hash with its size and status, which identifies a communicator the Inspector plugin dumps as "unknown"."""
    if job is None:
        return []
    wanted = {comm_hash(c): c for c in comm_ids}
    return [{"comm_id": wanted[comm_hash(key)], "ras_hash": comm.hash, "size": comm.size, "status": comm.status}
            for key, comm in job.comms.items() if comm_hash(key) in wanted]  # fmt: skip


def drop_coverage(
    markers: Mapping[tuple[str, int, str], CommDrops],
    f: Finding,
    gpus: Mapping[tuple[str, int], list[InspectorMetricsRecord]] | None = None,
) -> dict[str, object]:
    """The finding's coverage with the Inspector drop counters of its processes and communicators (``ring_drops``:
    markers seen, records they announced, operations the plugin's rings dropped meanwhile and since the process
    started) and, for a process whose export the agent received (OTLP verbose, which has no markers), the counters of
    its GPUs (``gpu_drops``: operations its rings recorded and dropped since the process started); what was dropped
    is named among what was left out. Unchanged where neither came (plugins before output format v4.1 write no
    markers)."""
    coverage, left_out = dict(f.coverage), list(cast(list[str], f.coverage.get("left_out", [])))
    drops = [c for (host, pid, comm_id), c in markers.items()
             if host == f.hostname and (f.pid is None or (pid == f.pid and comm_id in f.comm_ids))]  # fmt: skip
    if drops:
        records, dropped = sum(c.records for c in drops), sum(c.dropped for c in drops)
        share = dropped / (records + dropped) if records + dropped else 0.0
        coverage["ring_drops"] = {"processes": len({c.latest.pid for c in drops}), "communicators": len(drops),
                                  "dumps": sum(c.dumps for c in drops), "records": records, "dropped": dropped,
                                  "dropped_share": round(share, 4),
                                  "dropped_total": sum(c.dropped_total for c in drops)}  # fmt: skip
        if dropped:
            left_out.append(f"{dropped} operations the plugin's rings dropped ({share:.1%} of those its dump markers "
                            "counted): their time counts as compute")  # fmt: skip
    counters = [] if f.pid is None else (gpus or {}).get((f.hostname, f.pid), [])
    if counters:
        total = sum((g.coll_total or 0) + (g.p2p_total or 0) for g in counters)
        lost = sum((g.coll_dropped_total or 0) + (g.p2p_dropped_total or 0) for g in counters)
        share = lost / total if total else 0.0
        coverage["gpu_drops"] = {"gpus": sorted(g.gpu for g in counters), "operations": total, "dropped": lost,
                                 "dropped_share": round(share, 4)}  # fmt: skip
        if lost:
            left_out.append(f"{lost} operations the plugin's rings of its GPU dropped ({share:.1%} of those they "
                            "recorded since the process started, per its OTLP export)")  # fmt: skip
    if not drops and not counters:
        return f.coverage
    return {**coverage, "left_out": left_out}


class StragglerRule:
    """A finding carries the job of its communicators where RAS watches it; once that job has ended its stragglers
    are over, and their alerts resolve with the job."""

    name = "straggler"
    for_s, clear_s = 0.0, 120.0
    doc = RuleDoc(
        "warning, critical from 1.5x",
        "a confirmed finding of the straggler engine",
        "`aggregator.stragglers.*`",
    )

    def evaluate(self, state: LiveState, now_ns: int) -> Iterator[Condition]:
        tracker = state.stragglers
        for cluster, result in tracker.clusters.items():
            for f in result.findings:
                job = job_of(state, cluster, f.comm_ids)
                if job is not None and job.state == "ended":
                    continue
                notes = corroboration(state, cluster, f.hostname)
                notes += [f"GPU {g['gpu']} active probe: {x['metric']} {x.get('drop', 0):.0%} below its {x.get('basis')}"
                          for g in gpu_evidence(state, cluster, f.hostname) for x in g["findings"]]  # fmt: skip
                if f.kind == "communication":
                    notes += _link_notes(state, cluster, f.hostname)
                yield Condition(
                    rule=self.name,
                    severity="warning" if f.slowdown < 1.5 else "critical",
                    cluster=cluster,
                    node=f.hostname,
                    job=job.job_id if job is not None else None,
                    key=f"{f.kind}:{f.pid}",  # comm and rank stay in the evidence: the fingerprint must not move
                    entity=f"pid {f.pid}" if f.pid is not None else "node",
                    about_rank=f.rank,
                    summary=summary(f, notes),
                    evidence={
                        **f.as_dict(),
                        "coverage": drop_coverage(
                            state.inspector_drops.coverage(cluster),
                            f,
                            state.inspector_drops.gpu_coverage(cluster),
                        ),
                        "corroboration": notes,
                        "gpu": gpu_of(state, cluster, f.hostname, f.pid),
                        "ras_comms": ras_comms(job, f.comm_ids),
                    },
                )


class CollectiveHangRule:
    """One alert per cluster whose collectives stalled with ranks silent behind their peers (Inspector silence, ring
    capture); it names them, their communicators, collectives and nodes. A stall in the communicators of a job RAS
    watches is not this rule's: while the job lives its ``comm_hang`` is the one hang alert (it fires on this signal
    at once and carries these ranks as ``inspector_lagging``), and once it has ended its last collectives are its end,
    not a hang: one incident per cause."""

    name = "collective_hang"
    # hold-down: waits inside: hang_quiet_s of silence
    for_s, clear_s = 0.0, 60.0
    doc = RuleDoc(
        "critical",
        "Inspector silence: ranks behind a collective stalled `hang_quiet_s` (quiet where RAS watches the "
        "job: `comm_hang`)",
        "`aggregator.stragglers.hang_*`",
    )

    def evaluate(self, state: LiveState, now_ns: int) -> Iterator[Condition]:
        for cluster in list(state.stragglers.hang_finders):
            hangs = [h for h in state.hangs(cluster, now_ns) if not _spoken_for(state, cluster, h)]
            if not hangs:
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


def _spoken_for(state: LiveState, cluster: str, hang: Hang) -> bool:
    """Whether RAS speaks for this stall: its job has ended, or is live with op counts or ranks seen behind twice
    in its text statuses (its ``comm_hang`` judges)."""
    job = job_of(state, cluster, [hang.comm_id])
    if job is None:
        return False
    return job.state == "ended" or (
        job.state == "running"
        and any(c.op_total is not None or c.lag_polls >= LAG_POLLS for c in job.comms.values())
    )


def summary(f: Finding, notes: list[str]) -> str:
    """One line: who, how much, what it costs, and the corroborating signals."""
    where = f"{f.hostname}" + (f" pid {f.pid}" if f.pid is not None else "")
    if f.kind == "communication":
        text = f"communication straggler on {where}: {len(f.comms)} cross-node comms transfer {f.slowdown:.2f}x slower"
    else:
        text = f"compute straggler on {where}: collectives {f.slowdown:.2f}x slower, costs {f.cost:.0%} of job time"
        if f.pattern == "intermittent":
            text += (f" (intermittent at {f.pattern_resolution_s:g} s resolution: {f.burst_slowdown:.2f}x in bursts, "
                     f"{f.duty_cycle:.0%} of the time)")  # fmt: skip
    text += f"; lateness {f.z:.0f} robust sd"
    return text + (f"; {'; '.join(notes[:3])}" if notes else "")
