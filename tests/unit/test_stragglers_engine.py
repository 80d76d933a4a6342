"""The straggler engine on simulated jobs: every fault kind found and attributed right, healthy noise finds nothing,
in both capture models. The jobs go through the real on-disk format (simulator -> files -> reader -> engine); the
main cases also through the agent's summarizer (the engine fed ``inspector_summary`` records, as online)."""

from __future__ import annotations

import math
from pathlib import Path

import msgspec
import pytest

from ranksight.agent.collectors.inspector.dumps import DumpReader
from ranksight.aggregator.models.engines import ClusterEngines, decoded, queue_entry
from ranksight.aggregator.models.straggler.engine import StragglerEngine, analyze_records
from ranksight.aggregator.models.straggler.findings import Analysis, Finding, StragglerParams
from ranksight.formats.inspector import parse_op
from ranksight.simulate import scenarios
from ranksight.simulate.inspector import Fault, JobSpec, comms, run_job, summarize, write_job
from tests.previous_summaries import whole_windows

PARAMS = StragglerParams(window_s=2.0)
MODELS = ["ring", "sampled"]
FEEDS = ["raw", "summary"]


def job(**kwargs: object) -> JobSpec:
    """8 nodes x 4 GPUs, 200 steps: enough windows to confirm, small enough for a shared CI machine."""
    return JobSpec(**{"gpus_per_node": 4, **kwargs})  # type: ignore[arg-type]


def run(tmp_path: Path, spec: JobSpec, feed: str = "raw") -> Analysis:
    write_job(spec, tmp_path / "dump")
    reader = DumpReader(tmp_path / "dump")
    if feed == "raw":
        result = analyze_records(reader.records(), PARAMS)
    else:
        engine = StragglerEngine(PARAMS)
        records = sorted(reader.records(), key=lambda r: r.dump_ts_us)
        for _, summary in summarize(records, slice_s=PARAMS.slice_s):
            engine.add_summary(summary)
        result = engine.analyze()
    assert reader.bad_lines == 0 and result.bw_mismatches == 0
    assert result.capture_model == spec.capture
    return result


@pytest.mark.parametrize("capture", MODELS)
@pytest.mark.parametrize("feed", FEEDS)
def test_healthy_job_with_heavy_noise_and_warmup_has_no_findings(
    tmp_path: Path, capture: str, feed: str
) -> None:
    spec = job(capture=capture, noise=0.1, spike_prob=0.02, warmup_steps=30, seed=7)
    result = run(tmp_path, spec, feed)
    assert result.records > 10_000
    assert result.stragglers == []


@pytest.mark.parametrize("capture", MODELS)
@pytest.mark.parametrize("factor", [1.1, 2.0])
@pytest.mark.parametrize("feed", FEEDS)
def test_one_slow_gpu_is_the_straggler_not_its_victims(
    tmp_path: Path, capture: str, feed: str, factor: float
) -> None:
    spec = job(capture=capture, faults=[Fault("gpu", node=3, gpu=1, factor=factor)])
    [finding] = run(tmp_path, spec, feed).stragglers
    assert (finding.hostname, finding.pid, finding.kind) == ("node003", spec.pid(3, 1), "compute")
    assert finding.rank is not None and finding.comm is not None
    # the slowdown the rank costs the job (waits / step period): below the GPU's own factor, because with noise
    # the job would otherwise wait for the slowest healthy rank anyway
    assert 1 + (factor - 1) * 0.25 < finding.slowdown < 1 + (factor - 1) * 1.1
    assert finding.confidence >= 0.8


@pytest.mark.parametrize("capture", MODELS)
@pytest.mark.parametrize("feed", FEEDS)
def test_slow_node_is_reported_once_as_a_node(tmp_path: Path, capture: str, feed: str) -> None:
    spec = job(capture=capture, faults=[Fault("node", node=2, factor=1.5)])
    [finding] = run(tmp_path, spec, feed).stragglers
    assert (finding.hostname, finding.pid, finding.kind, finding.rank) == ("node002", None, "compute", None)
    assert 1.2 < finding.slowdown < 1.6


@pytest.mark.parametrize("capture", MODELS)
@pytest.mark.parametrize("feed", FEEDS)
def test_degraded_nic_is_communication_localized_to_its_node(tmp_path: Path, capture: str, feed: str) -> None:
    spec = job(capture=capture, faults=[Fault("nic", node=5, factor=3.0)])
    [finding] = run(tmp_path, spec, feed).stragglers
    assert (finding.hostname, finding.pid, finding.kind) == ("node005", None, "communication")
    assert 2.4 < finding.slowdown < 3.6


@pytest.mark.parametrize("capture", MODELS)
def test_intermittent_straggler_is_found(tmp_path: Path, capture: str) -> None:
    # 8 GPUs: with sampled records an intermittent straggler needs enough peers per comm to stand out
    spec = job(
        capture=capture, gpus_per_node=8, faults=[Fault("gpu", node=1, gpu=2, factor=1.5, probability=0.4)]
    )
    [finding] = run(tmp_path, spec).stragglers
    assert (finding.hostname, finding.pid, finding.kind) == ("node001", spec.pid(1, 2), "compute")


@pytest.mark.parametrize("capture", MODELS)
def test_late_onset_straggler_is_found_only_after_onset(tmp_path: Path, capture: str) -> None:
    spec = job(capture=capture, faults=[Fault("gpu", node=6, gpu=3, factor=1.5, start_step=120)])
    result = run(tmp_path, spec)
    [finding] = result.stragglers
    assert (finding.hostname, finding.pid) == ("node006", spec.pid(6, 3))
    assert finding.first_ts_us > spec.start_us + 120 * spec.compute_ms * 1000  # not before the fault began


def test_lowest_bandwidth_rank_is_a_victim(tmp_path: Path) -> None:
    """The naive answer is wrong: the straggler has the *highest* bandwidth of its communicators."""
    spec = job(faults=[Fault("gpu", node=3, gpu=1, factor=1.5)])
    write_job(spec, tmp_path / "d")
    records = list(DumpReader(tmp_path / "d").records())
    tp = [r for r in records if r.comm_name == "tp-n3" and r.busbw_gbs is not None]
    by_pid: dict[int, list[float]] = {}
    for r in tp:
        by_pid.setdefault(r.pid, []).append(r.busbw_gbs or 0.0)
    mean = {pid: sum(v) / len(v) for pid, v in by_pid.items()}
    assert max(mean, key=lambda p: mean[p]) == spec.pid(3, 1)
    [finding] = analyze_records(records, PARAMS).stragglers
    assert finding.pid == spec.pid(3, 1) != min(mean, key=lambda p: mean[p])


# -- diagnosis v2 on MoE jobs (tp/ep/edp/dp comms) from ranksight.simulate.scenarios ---------------------------------


def moe(tmp_path: Path, spec: JobSpec) -> Analysis:
    write_job(spec, tmp_path / "dump")
    return analyze_records(DumpReader(tmp_path / "dump").records())


@pytest.mark.parametrize("capture", MODELS)
def test_degraded_nic_is_one_communication_finding_and_no_peer_is_blamed(
    tmp_path: Path, capture: str
) -> None:
    spec = scenarios.nic(capture, seed=1)  # type: ignore[arg-type]
    [t] = scenarios.truth(spec)
    [finding] = moe(
        tmp_path, spec
    ).stragglers  # its ep/edp/dp peers arrive late, but none is a compute straggler
    assert (finding.hostname, finding.pid, finding.kind) == (t.hostname, None, "communication")
    assert abs(finding.slowdown - t.factor) / t.factor < 0.15
    name_of = {c.comm_id: c.name for phase in comms(spec) for c in phase}  # sampled records carry only the id
    names = {name_of.get(str(c["comm"]), str(c["comm"])) for c in finding.comms}
    assert names and all(n.split("-")[0] in ("ep", "edp", "dp") for n in names)  # cross-node comms only
    assert all(float(c["observed_us"]) > 2 * float(c["normal_us"]) for c in finding.comms)  # type: ignore[arg-type]


@pytest.mark.parametrize("capture", MODELS)
def test_intermittent_straggler_reports_duty_cycle_and_burst_slowdown(tmp_path: Path, capture: str) -> None:
    spec = scenarios.intermittent(capture, seed=1)  # type: ignore[arg-type]
    [t] = scenarios.truth(spec)
    [finding] = moe(tmp_path, spec).stragglers
    assert (finding.hostname, finding.pid, finding.kind) == (t.hostname, t.pid, "compute")
    assert finding.duty_cycle < 0.5 and finding.burst_slowdown > finding.slowdown
    average = 1 + t.duty * (t.factor - 1)
    assert abs(finding.slowdown - average) / average < 0.15 and finding.cost > 0.05


@pytest.mark.parametrize("capture", MODELS)
def test_two_stragglers_are_reported_and_nothing_else(tmp_path: Path, capture: str) -> None:
    spec = scenarios.two_stragglers(capture, seed=2)  # type: ignore[arg-type]
    found = moe(tmp_path, spec).stragglers
    assert {(f.hostname, f.pid, f.kind) for f in found} == {
        (t.hostname, t.pid, t.kind) for t in scenarios.truth(spec)
    }
    for f in found:  # the compute factor of each, against the truth
        [t] = [t for t in scenarios.truth(spec) if t.pid == f.pid]
        assert abs(f.slowdown - t.factor) / t.factor < 0.15


@pytest.mark.parametrize("capture", MODELS)
def test_noisy_healthy_moe_job_with_slow_gpus_and_hiccups_is_silent(tmp_path: Path, capture: str) -> None:
    spec = scenarios.healthy(capture, seed=4)  # type: ignore[arg-type]
    spec.gpu_speed_noise, spec.spike_prob = 0.025, 0.005
    assert moe(tmp_path, spec).stragglers == []


@pytest.mark.parametrize("offline", [True, False])
def test_online_finding_alerts_fast_updates_and_resolves_when_the_fault_ends(offline: bool) -> None:
    """Judged as it comes, by an offline engine and by the live one (``offline=False``), which alerts the same but
    keeps nothing that grows with the job: no set of the operations seen, no list of the findings that resolved."""
    spec = scenarios.straggler("ring", seed=2)
    fault = spec.faults[0]
    spec.faults = [Fault("gpu", fault.node, fault.gpu, 1.5, start_step=80, end_step=250)]
    timed, step_us = run_job(spec)
    records = sorted((parse_op(x) for lines in timed.values() for _, x in lines), key=lambda r: r.dump_ts_us)
    engine, seen = StragglerEngine(offline=offline), []
    clock = records[0].dump_ts_us
    for rec in records:
        if rec.dump_ts_us >= clock + 1_000_000:  # evaluated every second of dump time
            clock = rec.dump_ts_us
            seen.append((clock, [(f.hostname, f.pid) for f in engine.evaluate()]))
        engine.add(rec)
    culprit = (spec.hostname(fault.node), spec.pid(fault.node, fault.gpu))
    alerted = [ts for ts, found in seen if culprit in found]
    assert alerted and alerted[0] - step_us[80] <= 15_000_000  # onset -> alert
    assert all(found in ([], [culprit]) for _, found in seen)  # nothing else, ever
    assert seen[-1][1] == [] and alerted[-1] < step_us[-1]  # resolved after the fault ended
    kept = [(f.hostname, f.pid) for f in engine.history]
    assert (kept, len(engine._ops) > 1000) == (([culprit], True) if offline else ([], False))


def test_online_the_horizon_is_judged_every_judge_every_slices_offline_every_slice() -> None:
    """``judge_every`` (the aggregator's ``judge_every_s``): online, only every such slice ends a judged horizon (the
    engine's main cost at scale); the straggler is still found as fast and nothing else named; offline, every slice."""
    spec = scenarios.straggler("ring", seed=2)
    fault = spec.faults[0]
    spec.faults = [Fault("gpu", fault.node, fault.gpu, 1.5, start_step=80)]
    timed, step_us = run_job(spec)
    records = sorted((parse_op(x) for lines in timed.values() for _, x in lines), key=lambda r: r.dump_ts_us)
    culprit = (spec.hostname(fault.node), spec.pid(fault.node, fault.gpu))

    def judged_online(every: int) -> tuple[list[int], int]:
        engine, judged = StragglerEngine(StragglerParams(judge_every=every)), []
        judge = engine._judge
        engine._judge = lambda index, behind: (judged.append(index), judge(index, behind))[1]  # type: ignore[method-assign]
        clock, alerted = records[0].dump_ts_us, 0
        for rec in records:
            if rec.dump_ts_us >= clock + 1_000_000:  # evaluated every second, as the aggregator does
                clock = rec.dump_ts_us
                found = {(f.hostname, f.pid) for f in engine.evaluate()}
                assert found <= {culprit}
                alerted = alerted or (clock if culprit in found else 0)
            engine.add(rec)
        return judged, alerted

    every_slice, alerted_1 = judged_online(1)
    every_other, alerted_2 = judged_online(2)
    assert every_slice == list(range(every_slice[0], every_slice[-1] + 1))
    assert every_other and all(i % 2 == 1 for i in every_other)
    assert (
        0 < alerted_2 - step_us[80] <= 15_000_000 and alerted_2 == alerted_1
    )  # judged on the same evaluation

    offline, judged = StragglerEngine(StragglerParams(judge_every=2)), []
    judge = offline._judge
    offline._judge = lambda index, behind: (judged.append(index), judge(index, behind))[1]  # type: ignore[method-assign]
    assert [(f.hostname, f.pid) for f in offline.extend(records).analyze().stragglers] == [culprit]
    assert judged == list(range(judged[0], judged[-1] + 1))


def test_judge_every_s_is_whole_slices_at_least_one() -> None:
    from ranksight.aggregator.models.engines import params_of
    from ranksight.aggregator.models.straggler.settings import StragglerSettings

    def every(**values: float) -> int:
        return params_of(StragglerSettings.model_validate(values)).judge_every

    assert every() == 2 and every(judge_every_s=0.5) == 1 and every(judge_every_s=0.1) == 1
    assert every(judge_every_s=2.0, slice_s=0.25) == 8


@pytest.mark.parametrize("capture", MODELS)
def test_long_steps_stretch_the_horizon_so_hiccups_stay_silent_and_a_straggler_is_found(capture: str) -> None:
    """1 s steps with 2x one-step hiccups: a 6 s horizon would hold 5 steps, where one hiccup looks like a 1.2x
    straggler; the engine judges at least ``min_window_steps`` steps instead."""

    def found(faults: list[Fault]) -> list[tuple[str, int | None]]:
        spec = JobSpec(nodes=4, gpus_per_node=4, layout="moe", steps=150, compute_ms=1000, capture=capture,  # type: ignore[arg-type]
                       seed=1, spike_prob=0.01, noise=0.02, gpu_speed_noise=0.02, faults=faults,
                       dump_interval_ms=500)  # fmt: skip
        timed = run_job(spec)[0]
        records = sorted(
            (parse_op(x) for lines in timed.values() for _, x in lines), key=lambda r: r.dump_ts_us
        )
        return [(f.hostname, f.pid) for f in analyze_records(records).stragglers]

    assert found([]) == []
    assert found([Fault("gpu", 1, 2, 1.2, start_step=10)]) == [("node001", JobSpec().pid(1, 2))]


def test_healthy_ranks_whose_records_arrive_late_raise_nothing_and_a_true_straggler_is_still_found(
    tmp_path: Path,
) -> None:
    """Issue 18: on a loaded host an older agent (whole windows) reads the dump files behind; records past their
    window's grace are missing from the summaries, so the host's ranks look idle (computing) at the end of every
    window: a false, intermittent node-wide straggler. The engine judges only ranks whose ops it holds completely."""
    # 3 s behind, beyond the 2 s grace: the last second of each window comes late
    late = {"node002": 3_000_000, "node005": 3_000_000}
    for faults, expected in [
        ([], set()),
        ([Fault("gpu", node=6, gpu=1, factor=1.5)], {("node006", JobSpec().pid(6, 1))}),
    ]:
        spec = job(noise=0.05, seed=3, faults=faults)
        write_job(spec, tmp_path / f"dump{len(faults)}")
        records = sorted(DumpReader(tmp_path / f"dump{len(faults)}").records(), key=lambda r: r.dump_ts_us)
        summaries = [x for _, x in whole_windows(records, slice_s=PARAMS.slice_s, read_after_us=late)]
        assert sum(s.late for s in summaries) > 100  # the starved hosts did lose records
        engine = StragglerEngine(PARAMS)
        for s in summaries:
            engine.add_summary(s)
        found = engine.analyze().stragglers
        assert {(f.hostname, f.pid) for f in found} == expected
        # the straggler's evidence says whose records were incomplete and so not judged
        assert all("not judged" in f.evidence and "node002 pid" in f.evidence for f in found)


def test_parts_from_a_host_reading_behind_raise_nothing_online_and_a_true_straggler_is_still_found(
    tmp_path: Path,
) -> None:
    """Issue 18 with this version's agents: parts are never late. A host whose agent reads its dump files behind sends
    complete parts later: the online engine waits for its processes' records as it would for raw ones, and when they
    are further behind than it waits (twice the horizon: 9 and 20 s here), it does not judge them where their records
    are not in yet (they would look idle, i.e. computing) and judges those slices again once they are."""
    behind_us = {"node002": 20_000_000, "node005": 9_000_000}
    for faults, expected in [
        ([], set()),
        ([Fault("gpu", node=6, gpu=1, factor=1.5)], {("node006", JobSpec().pid(6, 1))}),
    ]:
        spec = job(noise=0.05, seed=3, faults=faults)
        write_job(spec, tmp_path / f"dump{len(faults)}")
        records = sorted(DumpReader(tmp_path / f"dump{len(faults)}").records(), key=lambda r: r.dump_ts_us)
        arrivals = sorted(
            ((at + behind_us.get(x.hostname, 0), x) for at, x in summarize(records, slice_s=PARAMS.slice_s)),
            key=lambda a: a[0],
        )
        engine, next_eval = StragglerEngine(PARAMS), arrivals[0][0] + 1_000_000
        for at, x in arrivals:  # evaluated every second as they arrive, as the aggregator does
            while at >= next_eval:
                engine.evaluate()
                next_eval += 1_000_000
            engine.add_summary(x)
        assert {(f.hostname, f.pid) for f in engine.analyze().stragglers} == expected


@pytest.mark.parametrize("capture", MODELS)
def test_a_straggler_whose_own_agent_reads_behind_is_one_compute_finding_not_a_slow_network(
    tmp_path: Path, capture: str
) -> None:
    """The demo at 32 nodes on a loaded machine: the straggler's host sends its parts seconds after its peers'. Until
    they are in, its cross-node comms hold only the peers' times, which include their wait for it: a comm's transfer
    time is its last arriver's, and that record is not in. Those comms are not judged while a member is behind (a
    false ~1000x "communication straggler" otherwise); the compute straggler is still found."""
    spec = job(capture=capture, noise=0.05, seed=5, faults=[Fault("gpu", node=1, gpu=2, factor=1.6)])
    write_job(spec, tmp_path / "dump")
    records = sorted(DumpReader(tmp_path / "dump").records(), key=lambda r: r.dump_ts_us)
    arrivals = sorted(
        ((at + (9_000_000 if x.hostname == "node001" else 0), x)
         for at, x in summarize(records, slice_s=PARAMS.slice_s)),
        key=lambda a: a[0],
    )  # fmt: skip
    engine, next_eval = StragglerEngine(PARAMS), arrivals[0][0] + 500_000
    for at, x in arrivals:
        while at >= next_eval:
            engine.evaluate()
            next_eval += 500_000
        engine.add_summary(x)
    found = engine.analyze().stragglers
    assert {(f.hostname, f.pid, f.kind) for f in found} == {("node001", JobSpec().pid(1, 2), "compute")}


@pytest.mark.parametrize("capture", MODELS)
def test_a_restarted_jobs_straggler_is_steady_from_its_first_finding(tmp_path: Path, capture: str) -> None:
    """The demo's second job run: the same straggler in a job that began within the horizon. Before its processes'
    first records they did not exist, which is not time spent computing: counted as such, the first finding read
    1.07x, intermittent (1.6x in bursts) for a steady 1.6x straggler."""
    fault = [Fault("gpu", node=1, gpu=2, factor=1.6)]
    runs = [job(capture=capture, noise=0.03, seed=4, faults=fault),
            job(capture=capture, noise=0.03, seed=5, faults=fault, run_tag="run2", pid_base=50000,
                start_us=JobSpec().start_us + 60_000_000)]  # fmt: skip
    records = []
    for i, spec in enumerate(runs):
        write_job(spec, tmp_path / f"run{i}")
        records += DumpReader(tmp_path / f"run{i}").records()
    records.sort(key=lambda r: r.dump_ts_us)
    assert records[-1].dump_ts_us < runs[1].start_us + 60_000_000  # each run within its minute
    engine, next_eval, first = StragglerEngine(PARAMS), records[0].dump_ts_us + 500_000, {}
    for at, x in summarize(records, slice_s=PARAMS.slice_s):
        while at >= next_eval:
            for f in engine.evaluate():
                first.setdefault(f.pid, f)
            next_eval += 500_000
        engine.add_summary(x)
    assert set(first) == {runs[0].pid(1, 2), runs[1].pid(1, 2)}
    for f in first.values():
        assert f.duty_cycle >= 0.9 and 1.45 <= f.slowdown <= 1.75, (f.pid, f.evidence)


@pytest.mark.parametrize("capture", MODELS)
def test_records_merged_into_slices_in_any_steps_judge_as_merged_at_once(
    tmp_path: Path, capture: str
) -> None:
    """Folded records wait in the ledger until an evaluation merges them into their slices (one row per key). A slice
    merged again and again as records keep coming (a part arriving late) must judge as one merged once: merging every
    50 records gives the same analysis as merging everything at the end."""
    spec = job(capture=capture, faults=[Fault("gpu", node=3, gpu=1, factor=1.4)], steps=120)
    write_job(spec, tmp_path / "dump")
    records = sorted(DumpReader(tmp_path / "dump").records(), key=lambda r: r.dump_ts_us)
    plain, merged = StragglerEngine(PARAMS), StragglerEngine(PARAMS)
    for i, rec in enumerate(records):
        plain.add(rec)
        merged.add(rec)
        if i % 50 == 0:
            merged._absorb()
    assert (
        [vars(f) for f in merged.analyze().stragglers] == [vars(f) for f in plain.analyze().stragglers] != []
    )


def test_an_ended_jobs_comms_and_keys_are_forgotten(tmp_path: Path) -> None:
    """Online, a comm with nothing left in the kept slices (its job ended) is dropped with its keys and best
    bandwidths, or every job an aggregator ever followed would stay in memory, and so is a size no kept slice holds:
    the keys numbered are exactly those the kept slices hold."""
    runs = [
        job(seed=4),
        job(seed=5, run_tag="run2", pid_base=50000, start_us=JobSpec().start_us + 60_000_000),
    ]
    records = []
    for i, spec in enumerate(runs):
        write_job(spec, tmp_path / f"run{i}")
        records += DumpReader(tmp_path / f"run{i}").records()
    records.sort(key=lambda r: r.dump_ts_us)
    # one collective of an odd size early in the second job: a key its comm never uses again
    odd = next(i for i, r in enumerate(records) if r.dump_ts_us > runs[1].start_us + 2_000_000)
    records[odd] = msgspec.structs.replace(records[odd], msg_size_bytes=12345)
    params = StragglerParams(
        window_s=PARAMS.window_s, catch_up_windows=1
    )  # a short reach: slices drop mid-job
    engine, next_eval, ids_seen = StragglerEngine(params), records[0].dump_ts_us + 500_000, set()
    for rec in records:
        while rec.dump_ts_us >= next_eval:
            engine.evaluate()
            ids_seen |= set(engine.comms)
            next_eval += 500_000
        engine.add(rec)
    engine.evaluate()
    first, second = ({c.comm_id for phase in comms(spec) for c in phase} for spec in runs)
    assert first <= ids_seen  # followed while the first job ran
    best = {key for key, low in engine._lows.ids.items() if not math.isnan(engine._low_best.values[low])}
    assert set(engine.comms) == second and {key[0] for key in best} <= second
    # the keys numbered are those the kept slices hold, no more (slices of the second job were dropped meanwhile)
    assert min(engine.slices) > runs[1].start_us // engine.slice_us
    held = {engine._aggs.keys[number] for rows in engine.slices.values() for number in rows.key.tolist()}
    assert set(engine._aggs.ids) == held and all(key[2] != 12345 for key in held)
    assert {engine._aggs.keys[number] for number in engine._aggs.ids.values()} == held
    # and so is the size, with its bus bytes and best bandwidth
    assert set(engine._lows.ids) == {key[:3] for key in held} and all(key[2] != 12345 for key in best)


@pytest.mark.parametrize("feed", ["raw", "summaries"])
def test_online_a_host_whose_clock_runs_ahead_is_not_judged_and_blinds_nothing(feed: str) -> None:
    """Online (the caller's clock set), records dumped more than ``clock_ahead_s`` past it are counted, not judged: a
    host a day ahead would be the newest process, the only one complete_slice waits for, and the job's real slices
    would be dropped as stale with its straggler never named (as here without the clock)."""
    spec = scenarios.straggler("ring", seed=2)
    fault = spec.faults[0]
    timed, _ = run_job(spec)
    records = sorted((parse_op(x) for lines in timed.values() for _, x in lines), key=lambda r: r.dump_ts_us)
    items = ([(r.dump_ts_us, r) for r in records] if feed == "raw"
             else summarize(records, slice_s=PARAMS.slice_s))  # fmt: skip
    at, model = items[0]  # before the straggler's onset: a host ahead from the start
    day = 86_400_000_000
    if feed == "raw":
        stray: object = msgspec.structs.replace(model, hostname="ahead", dump_ts_us=model.dump_ts_us + day)
    else:
        stray = msgspec.structs.replace(model, hostname="ahead", window_start_us=model.window_start_us + day,
                                        last_dump_ts_us=model.last_dump_ts_us + day)  # fmt: skip
    items.insert(1, (at, stray))
    culprit = (spec.hostname(fault.node), spec.pid(fault.node, fault.gpu))

    def alerted(clock: bool) -> bool:
        engine, next_eval, found = StragglerEngine(PARAMS, offline=False), items[0][0] + 500_000, False
        for at, item in items:
            while at >= next_eval:
                found |= culprit in [(f.hostname, f.pid) for f in engine.evaluate()]
                next_eval += 500_000
            engine.clock_us = at if clock else None  # the aggregator's clock as the item arrives
            if feed == "raw":
                engine.add(item)  # type: ignore[arg-type]
            else:
                engine.add_summary(item)  # type: ignore[arg-type]
        assert engine.ahead == (stray.count if feed == "summaries" else 1) * clock  # type: ignore[attr-defined]
        return found

    assert alerted(clock=True) and not alerted(clock=False)


def test_the_live_engines_judge_by_the_aggregators_clock_and_count_what_was_ahead_of_it() -> None:
    """The aggregator's engines (:class:`ClusterEngines`) take its clock at each evaluation: a record dumped a day
    past it is counted in the cluster's findings (the status's ``stragglers.ahead``), the rest is judged."""
    spec = scenarios.straggler("ring", seed=2)
    timed, _ = run_job(spec)
    records = sorted((parse_op(x) for lines in timed.values() for _, x in lines), key=lambda r: r.dump_ts_us)
    stray = msgspec.structs.replace(
        records[0], hostname="ahead", dump_ts_us=records[0].dump_ts_us + 86_400_000_000
    )
    engines = ClusterEngines(PARAMS)
    batch = [queue_entry("c", False, [stray, *records[:1000]])]
    result = engines.evaluate(decoded(batch), set(), (records[999].dump_ts_us + 1_000_000) * 1000)["c"]
    assert result.ahead == 1 and result.records == 1000


def test_a_record_dumped_days_away_costs_no_more_than_its_slices_and_changes_no_finding() -> None:
    """Offline, every slice from the first to the last is judged: one record dumped a day after the others (a wrong
    clock, a corrupt dump) made that 170,000 empty horizons judged one by one. Horizons that cannot flag anything are
    passed over, and what is judged finds what it found without the record."""
    spec = scenarios.straggler("ring", seed=2)
    fault = spec.faults[0]
    timed, _ = run_job(spec)
    records = sorted((parse_op(x) for lines in timed.values() for _, x in lines), key=lambda r: r.dump_ts_us)
    stray = msgspec.structs.replace(records[-1], dump_ts_us=records[-1].dump_ts_us + 86_400_000_000)

    class Counting(StragglerEngine):
        judged = 0

        def _judge(self, index: int, behind: set[tuple[str, int]]) -> None:
            Counting.judged += 1
            super()._judge(index, behind)

    alone = [(f.hostname, f.pid) for f in StragglerEngine(PARAMS).extend(records).analyze().stragglers]
    engine = Counting(PARAMS).extend([*records, stray])
    found = [(f.hostname, f.pid) for f in engine.analyze().stragglers]
    assert found == alone == [(spec.hostname(fault.node), spec.pid(fault.node, fault.gpu))]
    slices = {r.dump_ts_us // engine.slice_us for r in [*records, stray]}
    assert Counting.judged < 2 * len(slices) + 10


@pytest.mark.parametrize("offline", [False, True])
def test_a_comm_idle_beyond_the_reach_and_back_is_judged_again(offline: bool) -> None:
    """A comm silent longer than the engine keeps slices (one used now and then: evaluation, checkpoints) is forgotten;
    when it is used again its keys are numbered under its new number, and every evaluation still judges (a key that
    kept the forgotten comm's number failed every evaluation from then on, the cluster's findings frozen)."""
    spec = scenarios.straggler("ring", seed=2)
    fault = spec.faults[0]
    timed, _ = run_job(spec)
    records = sorted((parse_op(x) for lines in timed.values() for _, x in lines), key=lambda r: r.dump_ts_us)
    start = records[0].dump_ts_us
    idle = {c.comm_id for phase in comms(spec) for c in phase if c.name.startswith("edp-")}
    summaries = [(at, s) for at, s in summarize(records, slice_s=PARAMS.slice_s)
                 if not (s.comm_id in idle and start + 8_000_000 <= s.window_start_us < start + 18_000_000)]  # fmt: skip
    params = StragglerParams(window_s=PARAMS.window_s, catch_up_windows=1)  # a reach of 4 s
    engine, next_eval = StragglerEngine(params, offline=offline), summaries[0][0] + 500_000
    forgotten = back = 0
    for at, summary in summaries:
        while at >= next_eval:
            engine.evaluate()
            forgotten += not idle & set(engine.comms)
            back += bool(forgotten and idle <= set(engine.comms))
            next_eval += 500_000
        engine.add_summary(summary)
    found = [(f.hostname, f.pid) for f in engine.analyze().stragglers]
    assert forgotten and back  # the idle comms went, and came back
    assert found == [(spec.hostname(fault.node), spec.pid(fault.node, fault.gpu))]


@pytest.mark.parametrize("capture", MODELS)
def test_keys_numbered_again_judge_as_before(
    tmp_path: Path, capture: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Forgotten keys (ended jobs, sizes that came and went) leave numbers that every per-key array would keep; once
    they are many the live keys are numbered again and the slices' rows with them. With sizes that come and go and one
    node's records arriving 6 s late (merged into slices already judged), an engine that numbers its keys again after
    every evaluation finds the same at every evaluation as one that never does."""
    spec = job(capture=capture, faults=[Fault("gpu", node=3, gpu=1, factor=1.4)], steps=150)
    write_job(spec, tmp_path / "dump")
    records = sorted(DumpReader(tmp_path / "dump").records(), key=lambda r: r.dump_ts_us)
    records = [msgspec.structs.replace(r, msg_size_bytes=1000 + i) if i % 97 == 0 else r
               for i, r in enumerate(records)]  # fmt: skip
    arrivals = sorted(((r.dump_ts_us + (6_000_000 if r.hostname == "node005" else 0), r) for r in records),
                      key=lambda a: a[0])  # fmt: skip

    def online(engine: StragglerEngine) -> list[list[tuple[object, ...]]]:
        seen, next_eval = [], arrivals[0][0] + 500_000
        for at, rec in arrivals:
            while at >= next_eval:
                seen.append([(f.key, round(f.slowdown, 9), round(f.z, 9)) for f in engine.evaluate()])
                next_eval += 500_000
            engine.add(rec)
        return seen

    dropped = []  # numbers of forgotten keys each renumbering dropped

    class Renumbering(StragglerEngine):
        def evaluate(self, final: bool = False) -> list[Finding]:
            found = super().evaluate(final)
            numbered = len(self._aggs.keys)
            self._renumber()
            dropped.append(numbered - len(self._aggs.keys))
            return found

    params = StragglerParams(window_s=PARAMS.window_s, catch_up_windows=1)  # a short reach: keys die mid-job
    monkeypatch.setattr("ranksight.aggregator.models.straggler.slices.MAX_DEAD_KEYS", 1 << 40)
    always, never = online(Renumbering(params)), online(StragglerEngine(params))
    assert sum(dropped) > 20 and always == never and any(always)


def test_hostile_summaries_fold_nothing_they_cannot_and_stop_nothing() -> None:
    """A summary's window far beyond 64-bit arithmetic (its rows dropped), parallel lists of other lengths (folded as
    far as all go) and an empty one: the engine goes on and judges the rest."""
    spec = scenarios.straggler("ring", seed=2)
    timed, _ = run_job(spec)
    records = sorted((parse_op(x) for lines in timed.values() for _, x in lines), key=lambda r: r.dump_ts_us)
    fault = spec.faults[0]
    culprit = (spec.hostname(fault.node), spec.pid(fault.node, fault.gpu))
    summaries = [x for _, x in summarize(records, slice_s=PARAMS.slice_s)]
    model = summaries[len(summaries) // 2]
    hostile = [
        msgspec.structs.replace(model, window_start_us=2**63 - 1, slice_us=2**62, slice_index=[2**62]),
        msgspec.structs.replace(model, slice_count=model.slice_count[:1]),
        msgspec.structs.replace(model, slice_index=[], slice_count=[]),
    ]
    engine = StragglerEngine(PARAMS)
    engine.add_summaries(hostile + summaries)
    assert [(f.hostname, f.pid) for f in engine.analyze().stragglers] == [culprit]
    assert max(engine.slices) < 2**40  # nothing folded out of range
