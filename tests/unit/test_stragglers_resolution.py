"""The straggler engine at the dump intervals operators use: what it claims never goes finer than the data supports
(an op's completion is known only to its dump tick; sampled capture writes one op per communicator per tick), sampled
capture finds weak stragglers from many single-slot samples, unrecorded time is said, unnamed communicators are shown
by id and layout, a slow link has a cost. Jobs come from the project's simulator (``ranksight.simulate``), written in
the plugin's line format and parsed by the agent's parser."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from collections import Counter, defaultdict
from fractions import Fraction
from typing import cast

import msgspec
import pytest

from ranksight.aggregator.models.straggler.compute import ComputeModel, PoolPattern, chance_slow
from ranksight.aggregator.models.straggler.engine import StragglerEngine, analyze_records
from ranksight.aggregator.models.straggler.findings import Finding, StragglerParams
from ranksight.formats.inspector import parse_op
from ranksight.schemas.records import InspectorRecord
from ranksight.simulate import plugin_scenarios, scenarios
from ranksight.simulate.inspector import Fault, JobSpec, comms, run_job


def records_of(spec: JobSpec) -> list[InspectorRecord]:
    timed = run_job(spec)[0]
    return sorted(
        (parse_op(line) for lines in timed.values() for _, line in lines), key=lambda r: r.dump_ts_us
    )


def spec_at(cls: str, capture: str, seed: int, dump_ms: float, **kwargs: object) -> JobSpec:
    return dataclasses.replace(scenarios.CLASSES[cls](capture, seed), dump_interval_ms=dump_ms, **kwargs)  # type: ignore[arg-type]


def only(findings: list[Finding], spec: JobSpec) -> Finding:
    [t] = scenarios.truth(spec)
    [f] = findings
    assert (f.hostname, f.pid, f.kind) == (t.hostname, t.pid, t.kind)
    return f


def first_alert_s(
    spec: JobSpec, records: list[InspectorRecord], t: scenarios.Truth
) -> tuple[float | None, set[tuple[str, int | None, str]]]:
    """The live engine evaluated every second of dump time, as the aggregator does: seconds from the fault's onset to the
    first finding naming its culprit (None: never), and every finding's culprit."""
    onset = records[0].dump_ts_us + (spec.compute_ms * 1.15 * t.onset_step) * 1000
    engine, alerted, seen = StragglerEngine(offline=False), None, set()
    next_eval = records[0].dump_ts_us + 1_000_000
    for rec in records:
        while rec.dump_ts_us >= next_eval:
            engine.clock_us = next_eval
            for f in engine.evaluate():
                seen.add((f.hostname, f.pid, f.kind))
                if alerted is None and (f.hostname, f.pid) == (t.hostname, t.pid):
                    alerted = (next_eval - onset) / 1e6
            next_eval += 1_000_000
        engine.add(rec)
    return alerted, seen


@pytest.mark.parametrize("dump_ms", [100.0, 1000.0, 2000.0])
@pytest.mark.parametrize("seed", [2, 6])
def test_a_steady_straggler_is_never_called_intermittent_at_any_dump_interval(
    dump_ms: float, seed: int
) -> None:
    """Ring ticks 1 s apart put a second of ops in one 0.5 s slice and none in the next: judged slice by slice, a
    steady 1.5x straggler read as intermittent (duty 0.25, bursts 3.2x). Counted from tick to tick it is steady (or,
    with too few pools, undetermined), at a stated resolution no finer than the dump interval."""
    spec = spec_at("compute_1.5", "ring", seed, dump_ms, steps=900)
    f = only(analyze_records(records_of(spec)).stragglers, spec)
    assert f.pattern in ("steady", "undetermined") and f.duty_cycle == 1.0
    assert abs(f.slowdown - 1.5) / 1.5 < 0.1
    assert f.pattern_resolution_s >= dump_ms / 1000 - 1e-9
    assert f.coverage["dump_interval_s"] == pytest.approx(dump_ms / 1000, rel=0.05)
    assert f.coverage["capture_model"] == "ring"
    assert "steady or intermittent undetermined" in f.evidence or "steady at" in f.evidence


def test_bursts_longer_than_the_resolution_are_intermittent_with_their_duty_and_burst_size() -> None:
    """2x slow for 60 steps in every 180 (~3 s in ~9 s) at 100 ms dumps: resolvable, so intermittent, its duty and
    burst size near the truth."""
    spec = dataclasses.replace(
        scenarios.healthy("ring", 3), steps=1200, dump_interval_ms=100.0,
        faults=[Fault("gpu", 1, 2, 2.0, start_step=80, burst_steps=60, every_steps=180)],
    )  # fmt: skip
    f = only(analyze_records(records_of(spec)).stragglers, spec)
    assert f.pattern == "intermittent" and "intermittent at" in f.evidence
    assert abs(f.duty_cycle - 1 / 3) < 0.15 and abs(f.burst_slowdown - 2.0) < 0.35


def test_bursts_shorter_than_the_dump_interval_are_not_given_a_duty_cycle() -> None:
    """10 slow steps in every 40 (~0.5 s bursts) at 2 s dumps: no pool is shorter than a tick, so the engine must not
    claim a burst size or duty cycle for them."""
    spec = spec_at("intermittent", "ring", 1, 2000.0, steps=900)
    f = only(analyze_records(records_of(spec)).stragglers, spec)
    assert f.pattern_resolution_s >= 2.0
    assert f.pattern != "intermittent" and f.duty_cycle == 1.0


@pytest.mark.parametrize(("factor", "within_s"), [(1.2, 60.0), (1.1, 120.0)])
def test_sampled_capture_finds_a_weak_straggler_from_many_single_slot_samples(
    factor: float, within_s: float
) -> None:
    """2.28/2.29 write one op per communicator per 1 s tick: a 1.2x straggler alerts within 60 s of its onset and a
    1.1x one within 120 s, online, and the healthy ranks raise nothing."""
    spec = spec_at(f"compute_{factor}", "sampled", 2, 1000.0, steps=2800)
    records = records_of(spec)
    [t] = scenarios.truth(spec)
    alerted, seen = first_alert_s(spec, records, t)
    assert alerted is not None and alerted <= within_s
    assert seen == {(t.hostname, t.pid, "compute")}
    f = only(analyze_records(records).stragglers, spec)
    assert f.coverage["capture_model"] == "sampled"
    assert any("Send/Recv" in note for note in f.coverage["left_out"])  # type: ignore[union-attr]


@pytest.mark.parametrize("seed", [1, 2])
def test_a_slow_nic_under_sampled_capture_is_its_node_alone(seed: int) -> None:
    """Sampled hybrid job, one node's NIC at 40 %: its EP and DP comms are slow. The first DP gradient bucket is the
    rarest in its comm's slot (the slot holds the last op), so some windows hold that size only from a rank that waited
    in it (for a partner delayed by the slow NIC): its shortest time is no transfer time, and read as one it made a
    false slow comm of a healthy node. Only sizes sampled on every rank are compared."""
    spec = spec_at("nic", "sampled", seed, 1000.0, steps=2680, layout="hybrid")
    f = only(analyze_records(records_of(spec)).stragglers, spec)
    assert abs(f.slowdown - 2.5) < 0.25


@pytest.mark.parametrize("seed", [1, 2])
def test_a_weak_straggler_judged_by_lateness_claims_no_pattern_finer_than_its_samples(seed: int) -> None:
    """Sampled hybrid job, 1.1x: the collective carrying the straggler's waits (TP AllGather, after its compute) is the
    rarest in its communicator's slot, so most pools hold no sample of it and read on time. Judged pool by pool the
    steady straggler read as intermittent; its pattern is undetermined at the coarser resolution its samples give."""
    spec = spec_at("compute_1.1", "sampled", seed, 1000.0, steps=2680, layout="hybrid")
    f = only(analyze_records(records_of(spec)).stragglers, spec)
    assert f.coverage["compared_by"] == "lateness"
    assert f.pattern != "intermittent" and f.duty_cycle == 1.0
    assert f.pattern_resolution_s >= 3.0  # three 1 s ticks at the least
    assert (
        f.pattern == "steady"
        or "known only where a sample of the collective carrying its waits" in f.evidence
    )


@pytest.mark.parametrize("cls", ["compute_1.2", "straggler"])
def test_sampled_capture_at_5_s_dumps_holds_enough_ticks_to_find_a_straggler(cls: str) -> None:
    """Hybrid job, sampled at 5 s dumps: the horizon holds the ticks a weak straggler needs (48, over 240 s) instead of
    stopping at the ring's stretch cap (120 s: 24 ticks, and the straggler went unseen)."""
    spec = spec_at(cls, "sampled", 1, 5000.0, steps=scenarios.ONSET_STEP + 5200, layout="hybrid")
    f = only(analyze_records(records_of(spec)).stragglers, spec)
    assert f.coverage["dump_interval_s"] == pytest.approx(5.0, rel=0.05)


def test_the_sampled_horizon_spans_no_more_dump_time_than_its_bound() -> None:
    """Ticks far apart (a long dump interval, or a peer's clock) stretch the sampled horizon only up to
    ``sampled_max_window_s`` (every judgement walks the horizon's slices); below it, the ring's stretch cap holds."""
    spec = spec_at("compute_1.2", "sampled", 1, 5000.0, steps=scenarios.ONSET_STEP + 2000, layout="hybrid")
    records = records_of(spec)
    params = StragglerParams()
    ring_cap_s = params.max_stretch * params.window_s
    for bound_s, span_s in ((60.0, ring_cap_s), (200.0, 200.0), (300.0, 240.0)):
        engine = StragglerEngine(dataclasses.replace(params, sampled_max_window_s=bound_s)).extend(records)
        engine.analyze()
        assert engine._horizon_now * engine.slice_us / 1e6 == pytest.approx(span_s, abs=2 * params.slice_s)


def test_noisy_healthy_sampled_jobs_raise_nothing() -> None:
    for seed in (1, 4):
        spec = spec_at("noisy_healthy", "sampled", seed, 1000.0, steps=2000)
        assert analyze_records(records_of(spec)).stragglers == []


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_noisy_healthy_hybrid_ring_jobs_at_1s_dumps_raise_nothing(seed: int) -> None:
    """Ring capture at 1 s dumps, hybrid layout, 2-4 % healthy speed spread and a 3x hiccup every ~100 rank-steps: a
    hiccup fills one 1 s pool of a process (~1.2x), and a few landing on one process within a horizon read as an
    intermittent 1.1x straggler against its peers' pool-to-pool noise. As often as its peers' pools are that slow,
    they come by chance on one of 16 processes: nothing is reported."""
    spec = spec_at("noisy_healthy", "ring", seed, 1000.0, steps=880, layout="hybrid")
    assert analyze_records(records_of(spec)).stragglers == []


@pytest.mark.parametrize("seed", [3, 4])
def test_an_intermittent_straggler_in_a_noisy_hybrid_job_is_found_and_alone(seed: int) -> None:
    """The same noisy job, one GPU 1.5x slower in bursts of 30 steps in every 200 (~1.4 s in ~9 s, 15 % of the steps):
    its bursts recur far more often than its peers' hiccups would bring them, so it is found, intermittent, at its
    burst size; no healthy process beside it."""
    spec = dataclasses.replace(
        spec_at("noisy_healthy", "ring", seed, 1000.0, steps=1400, layout="hybrid"),
        faults=[
            Fault("gpu", seed % 4, 1, 1.5, start_step=scenarios.ONSET_STEP, burst_steps=30, every_steps=200)
        ],
    )
    f = only(analyze_records(records_of(spec)).stragglers, spec)
    assert f.pattern == "intermittent" and abs(f.burst_slowdown - 1.5) <= 0.15


def test_the_simulators_sampled_capture_is_the_plugins() -> None:
    """2.28/2.29: one slot per communicator holding the last op completed (of any type), written at a tick only when
    one completed since the last, ``coll_sn`` per type from 0, each process ticking at its own phase."""
    spec = dataclasses.replace(scenarios.healthy("sampled", 1), steps=120, dump_interval_ms=250.0)
    timed = run_job(spec)[0]
    ticks: dict[tuple[str, int], set[int]] = defaultdict(set)
    sns = []
    for proc, lines in timed.items():
        per_tick = Counter()
        for ts, line in lines:
            rec = parse_op(line)
            per_tick[(ts, rec.comm_id)] += 1
            ticks[proc].add(ts)
            sns.append(rec.sn)
        assert max(per_tick.values()) == 1  # one slot per comm per tick
    assert min(sns) == 0 or min(sns) < spec.dump_interval_ms / spec.compute_ms
    phases = {min(t) % 250_000 for t in ticks.values()}
    assert len(phases) > len(ticks) // 2  # ticks unaligned across processes


def test_a_communicator_without_a_name_is_shown_by_id_and_layout() -> None:
    """The plugin dumps ``"comm_name":"unknown"`` for a communicator created without a name."""
    spec = spec_at("compute_2.0", "ring", 3, 100.0)
    records = [msgspec.structs.replace(r, comm_name="unknown") for r in records_of(spec)]
    f = only(analyze_records(records).stragglers, spec)
    assert f.comm != "unknown" and f.comm in f.comm_ids
    assert f"comm {f.comm} (4 ranks on 1 host(s), intra-node, TP-like)" in f.evidence
    assert "unknown" not in f.evidence


def test_a_degraded_nic_costs_its_share_of_step_time_and_its_evidence_lists_what_was_compared() -> None:
    spec = spec_at("nic", "ring", 1, 1000.0, steps=900)
    steps = run_job(spec)[1]
    lengths = [b - a for a, b in itertools.pairwise(steps)]
    before, after = sorted(lengths[20:79])[30], sorted(lengths[100:])[len(lengths[100:]) // 2]
    true_cost = 1 - before / after
    f = only(analyze_records(records_of(spec)).stragglers, spec)
    assert abs(f.cost - true_cost) < 0.5 * true_cost
    assert "its other peers' comms are normal" not in f.evidence
    for comm in f.comms:  # normal_us is one collective at one message size
        assert {"coll", "size_bytes", "normal_us", "observed_us", "comm_id", "layout"} <= set(comm)
    first = f.comms[0]
    assert f"{first['layout']} {first['coll']}" in f.evidence
    assert "without " + f.hostname in f.evidence
    json.dumps(f.as_dict())


def test_pipeline_stages_are_judged_apart() -> None:
    """Processes connected only through Send/Recv and job-wide comms are different pipeline stages: each stage is its
    own yardstick (their unrecorded Send/Recv waits differ)."""
    spec = JobSpec(nodes=4, gpus_per_node=4, steps=5)
    engine = StragglerEngine()
    for rec in records_of(spec):
        engine.add(rec)
    everyone = sorted(engine.proc_last)
    # the dense layout's pp comms (AllGather) join the stages: the job is one group
    assert engine._stages(everyone) == [everyone]
    # without them (as if Send/Recv), each stage (dp-s0: nodes 0, 2; dp-s1: nodes 1, 3) is apart
    pp = [c.comm_id for phase in comms(spec) for c in phase if c.name.startswith("pp")]
    for cid in pp:
        engine.comms[cid].p2p = True
    engine._members_version += 1
    stages = sorted(sorted({h for h, _ in stage}) for stage in engine._stages(everyone))
    assert stages == [["node000", "node002"], ["node001", "node003"]]


def _p2p_line(comm: str, rank: int, op: str, sn: int, exec_us: int, ts: int, host: str, pid: int) -> str:
    """One 2.30 ``p2p_perf`` line, as the plugin writes a Send/Recv (its bandwidths by its own formula)."""
    from ranksight.formats.inspector import bandwidths_gbs

    size = 4 << 20
    algbw, busbw = bandwidths_gbs(op, 2, size, exec_us) or (0.0, 0.0)
    return (
        f'{{"header":{{"id":"{comm}","comm_name":"unknown","rank":{rank},"n_ranks":2,"nnodes":2}},'
        f'"metadata":{{"inspector_output_format_version":"v4.0","git_rev":"t","rec_mechanism":"nccl_profiler_interface",'
        f'"dump_timestamp_us":{ts},"hostname":"{host}","pid":{pid}}},"p2p_perf":{{"p2p":"{op}","p2p_sn":{sn},'
        f'"p2p_peer":{1 - rank},"p2p_msg_size_bytes":{size},"p2p_exec_time_us":{exec_us},'
        f'"p2p_timing_source":"kernel_gpu","p2p_algobw_gbs":{algbw:.6f},"p2p_busbw_gbs":{busbw:.6f}}}}}'
    )


def test_slow_send_recv_communicators_locate_a_degraded_link() -> None:
    """Pipeline Send/Recv between neighbouring nodes (a ring of 4), 2 GPUs each, 2.30 ring records: the transfers
    through node000 take 2.5x as long. Its four Send/Recv comms are slow, the four others normal: node000's network,
    its comms shown by id and layout."""
    records = []
    pairs = [(n, (n + 1) % 4, g) for n in range(4) for g in range(2)]
    for step in range(400):
        ts = 1_750_000_000_000_000 + step * 50_000
        for a, b, g in pairs:
            comm = f"0x{a}{b}{g}aa"
            slow = 2.5 if 0 in (a, b) else 1.0
            exec_us = round(1000 * slow * (1 + 0.02 * ((step * 7 + a + g) % 5)))
            for rank, (node, op) in enumerate(((a, "Send"), (b, "Recv"))):
                dump = ts - ts % 100_000 + 100_000
                records.append(
                    parse_op(
                        _p2p_line(comm, rank, op, step, exec_us, dump, f"node{node:03d}", 100 + node * 10 + g)
                    )
                )
    records.sort(key=lambda r: r.dump_ts_us)
    [f] = analyze_records(records).stragglers
    assert (f.hostname, f.pid, f.kind) == ("node000", None, "communication")
    assert len(f.comms) == 4 and abs(f.slowdown - 2.5) < 0.2
    assert all(
        c["coll"] in ("Send", "Recv") and "two ranks on two nodes, PP-like" in str(c["layout"])
        for c in f.comms
    )
    assert "unknown" not in f.evidence and f.cost > 0


@pytest.mark.parametrize("seed", [2, 3, 4])
def test_sampled_hybrid_job_names_its_straggler_by_how_late_it_arrives(seed: int) -> None:
    """The hybrid layout under sampled capture (2.28/2.29: no Send/Recv recorded): pipeline waits count as compute and
    the rare samples of the collective carrying the waits spread every estimate of time in collectives widely. The
    straggler is named by its lateness within its communicators (its exec times short, its peers' long), its pipeline
    neighbour (which waited for it in an unrecorded Send/Recv) is not, and the slowdown is near its own."""
    spec = plugin_scenarios.CLASSES["compute_1.5"]("sampled", seed, 1000.0)
    [t] = plugin_scenarios.truth(spec)
    [f] = analyze_records(records_of(spec)).stragglers
    assert (f.hostname, f.pid, f.kind) == (spec.hostname(t.node), spec.pid(t.node, t.gpu), "compute")
    assert f.coverage["compared_by"] == "lateness" and "later than the other ranks" in f.evidence
    assert abs(f.slowdown - t.expected_slowdown) / t.expected_slowdown <= 0.15


@pytest.mark.parametrize("seed", [2, 5])
def test_sampled_hybrid_straggler_at_long_dumps_alone_and_at_its_slowdown(seed: int) -> None:
    """At 2 s dumps the rarely sampled collective that carries the waits drops out of many windows: the straggler's
    lateness then reads low, near that of its pipeline neighbour (late at its next collective after waiting for it in
    an unrecorded Recv). The neighbour waits for the straggler in the two-rank EP comm they share, so it is a victim,
    not a finding; the straggler's figure comes from the window compared on the most collective types."""
    spec = plugin_scenarios.CLASSES["compute_1.5"]("sampled", seed, 2000.0)
    [t] = plugin_scenarios.truth(spec)
    [f] = analyze_records(records_of(spec)).stragglers
    assert (f.hostname, f.pid) == (spec.hostname(t.node), spec.pid(t.node, t.gpu))
    assert f.coverage["compared_by"] == "lateness" and cast(int, f.coverage["compared_collectives"]) >= 2
    assert abs(f.slowdown - t.expected_slowdown) / t.expected_slowdown <= 0.15


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_weak_straggler_whose_waits_are_sampled_twice_a_horizon_is_found(seed: int) -> None:
    """At 2 s dumps the collective carrying a 1.2x straggler's waits may be sampled only twice in a horizon: only the
    pools holding those samples can read it late, so it needs each of them slow, not three slow pools it cannot have."""
    spec = plugin_scenarios.CLASSES["compute_1.2"]("sampled", seed, 2000.0)
    [t] = plugin_scenarios.truth(spec)
    [f] = analyze_records(records_of(spec)).stragglers
    assert (f.hostname, f.pid) == (spec.hostname(t.node), spec.pid(t.node, t.gpu))
    assert abs(f.slowdown - t.expected_slowdown) / t.expected_slowdown <= 0.15


@pytest.mark.parametrize(("cls", "dump_ms"), [("healthy", 1000.0), ("noisy_healthy", 2000.0)])
def test_sampled_hybrid_healthy_jobs_raise_nothing(cls: str, dump_ms: float) -> None:
    for seed in (2, 3):
        spec = plugin_scenarios.CLASSES[cls]("sampled", seed, dump_ms)
        assert analyze_records(records_of(spec)).stragglers == []


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_a_sampled_job_shorter_than_a_horizon_names_its_straggler_and_a_noisy_one_nothing(seed: int) -> None:
    """Sampled at 1 s dumps, a job with ~27 s of dumps (the horizon holds 48 ticks), one GPU 1.5x slower from its 6th
    second on. A weak finding must stay flagged until part of the window judged is fresh records: counted against a
    whole horizon, 24 s, the job ended first and its straggler went unreported. The same short job, noisy and healthy,
    raises nothing."""
    spec = spec_at("compute_1.5", "sampled", seed, 1000.0, steps=369, layout="moe")
    records = records_of(spec)
    assert (records[-1].dump_ts_us - records[0].dump_ts_us) / 1e6 < 30
    f = only(analyze_records(records).stragglers, spec)
    assert abs(f.slowdown - 1.5) / 1.5 <= 0.15
    noisy = spec_at("noisy_healthy", "sampled", seed, 1000.0, steps=369, layout="moe")
    assert analyze_records(records_of(noisy)).stragglers == []


@pytest.mark.parametrize(
    ("dump_ms", "layout", "seed", "steps"), [(1000.0, "moe", 8, 1521), (2000.0, "hybrid", 3, 760)]
)
def test_hiccups_in_most_of_a_few_pools_are_not_a_steady_straggler(
    dump_ms: float, layout: str, seed: int, steps: int
) -> None:
    """Noisy healthy ring jobs: hiccups fall in most of one process's few pools (at 1 s, 4 of 7), so its typical pool
    reads slow (1.12x), far above its peers' typical ones. Taken as steady, it was not weighed against its peers'
    hiccups and was reported. As many pools as slow come by chance on one of the job's processes often enough:
    nothing is reported."""
    spec = spec_at("noisy_healthy", "ring", seed, dump_ms, steps=steps, layout=layout)
    assert analyze_records(records_of(spec)).stragglers == []


@pytest.mark.parametrize("seed", [10, 12])
def test_a_sampled_cross_node_comm_is_not_judged_on_a_sample_or_two(seed: int) -> None:
    """Sampled at 2 s dumps, a noisy healthy job's first ticks: each rank of a two-rank cross-node comm has one sample of
    a size, each of another op and both waits (warm-up), so their shortest read as a link 5-11x slow through two comms
    of one host. A (comm, coll, size) is judged only with enough samples that one is its last arriver's."""
    spec = spec_at("noisy_healthy", "sampled", seed, 2000.0, layout="moe")
    assert analyze_records(records_of(spec)).stragglers == []


def test_the_chance_of_slow_pools_holds_over_a_long_memory() -> None:
    """The binomial tail over thousands of pools (a suspect's memory after its pool length shrank) is the exact
    probability, not an overflow: ``math.comb`` of 1,100 pools is beyond a float."""
    quiet, background = [1.0] * 1094, [1.0] * 200 + [1.3] * 2
    rate = Fraction(3, 204)  # (2 peers' pools that slow + 1) / (202 + 2)

    def exact(n: int, k: int) -> float:
        return float(1 - sum(math.comb(n, i) * rate**i * (1 - rate) ** (n - i) for i in range(k)))  # exact

    assert chance_slow(quiet + [1.3] * 6, background, 1.1) == pytest.approx(exact(1100, 6), rel=1e-9)
    assert chance_slow(quiet[:600] + [1.3] * 40, background, 1.1) == pytest.approx(exact(640, 40), rel=1e-9)
    assert chance_slow([1.3] * 30, background, 1.1, pools=5000) == pytest.approx(exact(5000, 30), rel=1e-9)
    assert chance_slow(quiet[:600] + [1.3] * 500, background, 1.1) == 0.0  # below the smallest float


def test_a_steady_straggler_stays_steady_through_a_hiccup_before_its_onset_and_a_few_stray_pools() -> None:
    """Pools judged as they come from a steady 1.1x straggler: one hiccup pool before its onset (then quiet pools) and,
    sampled, a few single pools read far off (too few samples in them) are not pauses; a pause the pools resolve (two
    quiet pools in a row, again and again) is."""
    sd, resolution = 0.01, 1.0
    steady = [1.11, 1.10, 1.12] * 15
    hiccup_first = [1.07, 1.00, 1.01, 1.02, *steady]
    assert PoolPattern.judge(hiccup_first, sd, 0.05, resolution).kind == "steady"
    stray = list(steady)
    for i in (5, 17, 29, 38):  # isolated pools far below its peers' and at theirs: measures astray
        stray[i] = (0.75, 1.0, 0.96, 1.01)[(i // 5) % 4]
    assert PoolPattern.judge(stray, sd, 0.05, resolution).kind == "steady"
    paused = [1.11, 1.11, 1.11, 1.11, 1.0, 1.0] * 8
    judged = PoolPattern.judge(paused, sd, 0.05, resolution)
    assert judged.kind == "intermittent" and 0.6 <= judged.duty <= 0.75
    once = [*steady[:20], 1.0, 1.0, 1.0, *steady[20:]]  # one pause of three pools in 48: neither
    assert PoolPattern.judge(once, sd, 0.05, resolution).kind == "undetermined"


def test_an_onset_weighs_its_slow_pools_from_where_they_begin_and_a_hiccup_cluster_does_not() -> None:
    """Right after an onset a suspect's memory is mostly quiet pools from before it: its slow pools since the onset,
    counted at any of the memory's places, already come by chance far less than ``hiccup_chance``. A healthy
    process's few hiccups clustered at the end do not, however its memory is cut."""
    model = ComputeModel(StragglerParams())
    peers = [1.0 + 0.01 * (i % 5 - 2) for i in range(300)] + [1.25] * 9  # hiccups in 3 % of pools
    typicals = [1.0 + 0.005 * (i % 5 - 2) for i in range(31)]
    memory = [1.0] * 30 + [1.2] * 7
    onset = model._chance(memory, memory[-8:], typicals, peers, 0.01, 32, len(memory))
    assert onset <= StragglerParams().hiccup_chance
    cluster = [1.0] * 30 + [1.25, 1.0, 1.25, 1.25]  # as slow as the peers' hiccups
    assert model._chance(cluster, cluster[-8:], typicals, peers, 0.01, 32, len(cluster)) > 0.01
