"""The real NCCL Inspector plugin (../shared/peers/inspector, unmodified upstream builds of 2.28.9, 2.29.3, 2.30.7)
driven by ranksight's ctypes driver: one process per rank with its node's host name, the plugin's own dump thread
under libfaketime's clock speed-up; the files it writes are what the agent's parser and the straggler engine read."""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from ranksight.agent.collectors.inspector.dumps import DumpReader
from ranksight.aggregator.models.hangs import HangFinder
from ranksight.aggregator.models.straggler.engine import analyze_records
from ranksight.aggregator.models.straggler.findings import Finding
from ranksight.schemas.records import InspectorRecord
from ranksight.simulate import plugin_scenarios
from ranksight.simulate.inspector import Fault, JobSpec, RankOp, job_ops, write_job
from ranksight.simulate.inspector_plugin import (
    DEFAULT_PLUGIN_DIR,
    PLUGIN_VERSIONS,
    SAMPLED_VERSIONS,
    PluginError,
)
from ranksight.simulate.plugin_job import FAKETIME_LIB, PluginRun, run_job_through_plugin
from ranksight.simulate.scenarios import hang, truth

pytestmark = [
    pytest.mark.skipif(
        not DEFAULT_PLUGIN_DIR.is_dir(), reason=f"the real plugin is not at {DEFAULT_PLUGIN_DIR}"
    ),
    pytest.mark.skipif(
        os.geteuid() != 0, reason="a host name per simulated node needs a UTS namespace (root)"
    ),
    pytest.mark.skipif(not FAKETIME_LIB.is_file(), reason="libfaketime (Debian package) is not installed"),
]


def _job(version: str, dump_ms: float, **kwargs: object) -> JobSpec:
    """A small hybrid job: 4 nodes x 2 GPUs, TP/PP Send-Recv/EP/DP, 100 ms steps."""
    base: dict[str, object] = dict(
        nodes=4, gpus_per_node=2, pp=2, ep_nodes=2, layout="hybrid", steps=40, compute_ms=60.0, seed=3,
        capture="sampled" if version in SAMPLED_VERSIONS else "ring", dump_interval_ms=dump_ms, noise=0.02,
    )  # fmt: skip
    base.update(kwargs)
    return JobSpec(**base)  # type: ignore[arg-type]


def _run(
    spec: JobSpec, version: str, tmp_path: Path, speedup: float | None = 10.0
) -> tuple[PluginRun, list[InspectorRecord]]:
    run = run_job_through_plugin(spec, version, tmp_path / "dumps", speedup=speedup)
    reader = DumpReader(run.directory)
    records = list(reader.records())
    assert reader.bad_lines == 0
    return run, records


def _ops_by_process(spec: JobSpec, run: PluginRun) -> dict[tuple[str, int], list[RankOp]]:
    shift = run.start_us - spec.start_us
    return {
        run.processes[m]: [op._replace(end_us=op.end_us + shift) for op in ops]
        for m, ops in job_ops(spec).items()
    }


@pytest.mark.parametrize("version", PLUGIN_VERSIONS)
def test_each_version_writes_files_the_parser_reads_with_the_plugins_own_capture_model(
    version: str, tmp_path: Path
) -> None:
    spec = _job(version, 200.0)
    run, records = _run(spec, version, tmp_path)
    # one file per rank, named by the plugin after its node's host name and its pid
    assert sorted(p.name for p in run.files) == sorted(f"{h}-pid{p}.log" for h, p in run.processes.values())
    assert {r.hostname for r in records} == {spec.hostname(n) for n in range(spec.nodes)}
    sampled = version in SAMPLED_VERSIONS
    assert {r.capture_model for r in records} == {"sampled" if sampled else "ring"}
    p2p = [r for r in records if r.op_kind == "p2p"]
    if sampled:
        assert not p2p  # 2.28/2.29 record no Send/Recv
    else:
        assert {r.op for r in p2p} == {"Send", "Recv"}
        assert (
            min(r.msg_size_bytes for r in records) >= 8192
        )  # the 4 KiB DP bucket is under 2.30's size filter
        assert {r.comm_name for r in records} >= {"tp-n0", "pp-n0-g0", "ep-b0-g0", "dp-s0-g0"}
    # every record is an op the driver handed the plugin: its exec time exactly, written at a dump tick after the op
    # ended (the clocks of the plugin and the driver agree under libfaketime), at most a dump interval later (plus how
    # late the busiest process handed an op over, and the dump thread's own jitter)
    ops = _ops_by_process(spec, run)
    tolerance_us = spec.dump_interval_ms * 1000 + run.late_max_us + 50_000
    for r in records:
        proc = (r.hostname, r.pid)
        mine = [op for op in ops[proc] if (op.comm_hash, op.func, op.sn) == (r.comm_id, r.op, r.sn)]
        assert len(mine) == 1, r
        assert r.exec_time_us == mine[0].exec_us
        assert 0 <= r.dump_ts_us - mine[0].end_us <= tolerance_us, (r, mine[0])


def test_communicators_without_a_name_are_written_unknown_by_2_30_as_the_simulator_writes_them(
    tmp_path: Path,
) -> None:
    spec = _job("2.30.7", 200.0, nodes=2, steps=10, named_comms=False)
    _, records = _run(spec, "2.30.7", tmp_path)
    write_job(spec, tmp_path / "sim")
    simulated = list(DumpReader(tmp_path / "sim").records())
    assert {r.comm_name for r in records} == {r.comm_name for r in simulated} == {"unknown"}


@pytest.mark.parametrize("version", sorted(SAMPLED_VERSIONS))
def test_sampled_plugin_writes_the_last_completed_op_of_any_type_per_comm_at_each_tick(
    version: str, tmp_path: Path
) -> None:
    """The semantics the pure-Python simulator and the engine assume for 2.28/2.29, checked against the real plugin:
    one slot per communicator, overwritten by every op that completes (any type and size), written at a tick only
    when an op completed since the last; ``coll_sn`` counts per communicator and type from 0."""
    spec = _job(version, 1000.0, steps=60)
    run, records = _run(spec, version, tmp_path)
    ops = _ops_by_process(spec, run)
    by_tick: dict[tuple[tuple[str, int], str], list[int]] = defaultdict(list)
    slack_us = (
        run.late_max_us + 50_000
    )  # how late an op may have been handed over, and the dump thread's jitter
    for r in records:
        proc = (r.hostname, r.pid)
        mine = [op for op in ops[proc] if op.comm_hash == r.comm_id and op.func not in ("Send", "Recv")]
        at = next(i for i, op in enumerate(mine) if (op.func, op.sn) == (r.op, r.sn))
        assert r.exec_time_us == mine[at].exec_us
        # it had completed, and the comm's next op (of any type) had not
        assert mine[at].end_us <= r.dump_ts_us
        assert at + 1 == len(mine) or mine[at + 1].end_us > r.dump_ts_us - slack_us, (r, mine[at + 1])
        by_tick[(proc, r.comm_id)].append(r.dump_ts_us)
    # once per tick per communicator: a comm's records are a dump interval apart (less the dump thread's jitter)
    for stamps in by_tick.values():
        stamps.sort()
        assert all(b - a > spec.dump_interval_ms * 1000 * 0.8 for a, b in itertools.pairwise(stamps))


@pytest.mark.parametrize("version", sorted(SAMPLED_VERSIONS))
def test_sampled_plugins_dump_far_more_often_than_a_sub_second_interval(version: str, tmp_path: Path) -> None:
    """An upstream fact operators meet: 2.28/2.29 sleep ``interval // 1e6`` s plus ``interval % 1e6`` *nano*seconds
    between dumps (the microseconds are put in ``tv_nsec``), so 500 ms makes them write every half millisecond or so
    (whole seconds are right)."""
    spec = _job(version, 500.0, steps=20)
    _, records = _run(spec, version, tmp_path)
    stamps: dict[tuple[str, int, str], list[int]] = defaultdict(list)
    for r in records:
        stamps[(r.hostname, r.pid, r.comm_id)].append(r.dump_ts_us)
    gaps = sorted(b - a for v in stamps.values() for a, b in itertools.pairwise(sorted(v)))
    assert gaps[len(gaps) // 2] < 100_000  # most records of a comm far closer than 500 ms


def _keyed(
    findings: list[dict[str, Any]], processes: dict[tuple[str, int], tuple[int, int]]
) -> set[tuple[Any, ...]]:
    """Findings as (host, (node, GPU) or None for a node, kind): the same job's processes have other pids."""
    return {
        (f["hostname"], processes.get((f["hostname"], f["pid"])) if f["pid"] else None, f["kind"])
        for f in findings
    }


def test_the_pure_simulator_and_the_real_plugin_give_the_same_findings(tmp_path: Path) -> None:
    """The same job written by the pure-Python simulator and through the real 2.30.7 plugin at 100 ms dumps:
    ``ranksight analyze inspector --json`` finds the same culprit, kind and slowdown on both."""
    spec = _job("2.30.7", 100.0, steps=160, faults=[Fault("gpu", 2, 1, 1.5, start_step=20)])
    run = run_job_through_plugin(spec, "2.30.7", tmp_path / "plugin", speedup=5.0)
    write_job(spec, tmp_path / "sim")
    answers = {}
    for name in ("sim", "plugin"):
        out = subprocess.run([sys.executable, "-m", "ranksight.cli", "analyze", "inspector", str(tmp_path / name),
                              "--json"], capture_output=True, text=True, timeout=120, env=os.environ)  # fmt: skip
        assert out.returncode == 0, out.stderr
        answers[name] = json.loads(out.stdout)
        assert answers[name]["bad_lines"] == 0
    sim_procs = {(spec.hostname(n), spec.pid(n, g)): (n, g) for n in range(spec.nodes) for g in range(2)}
    plugin_procs = {proc: member for member, proc in run.processes.items()}
    sim = _keyed(answers["sim"]["stragglers"], sim_procs)
    real = _keyed(answers["plugin"]["stragglers"], plugin_procs)
    assert sim == real == {(spec.hostname(2), (2, 1), "compute")}
    slowdowns = [answers[n]["stragglers"][0]["slowdown"] for n in ("sim", "plugin")]
    assert abs(slowdowns[0] - slowdowns[1]) < 0.1, slowdowns
    assert answers["sim"]["operations"] == answers["plugin"]["operations"]


def _steady(f: Finding) -> bool:
    pattern = getattr(f, "pattern", None)
    return pattern == "steady" if isinstance(pattern, str) else f.duty_cycle >= 0.75


def test_a_steady_straggler_at_1s_ring_dumps_is_found_steady_at_its_slowdown(tmp_path: Path) -> None:
    spec = _job("2.30.7", 1000.0, steps=600, compute_ms=30.0, faults=[Fault("gpu", 1, 0, 1.5, start_step=80)],
                noise=0.025)  # fmt: skip
    run, records = _run(spec, "2.30.7", tmp_path, speedup=None)
    found = analyze_records(records).stragglers
    assert [(f.hostname, f.pid, f.kind) for f in found] == [(*run.processes[(1, 0)], "compute")]
    assert abs(found[0].slowdown - 1.5) / 1.5 <= 0.15
    assert _steady(found[0])


@pytest.mark.parametrize(("version", "dump_ms"), [("2.29.3", 1000.0), ("2.28.9", 2000.0)])
def test_a_straggler_under_sampled_capture_is_named_by_how_late_it_arrives(
    version: str, dump_ms: float, tmp_path: Path
) -> None:
    """The sampled plugins record no Send/Recv and one op per communicator per tick: the hybrid job's pipeline waits
    count as compute and its time in collectives is estimated from rare samples. Its 1.5x straggler is named by its
    lateness within its communicators, alone, at about its slowdown."""
    spec = plugin_scenarios.CLASSES["compute_1.5"]("sampled", 3, dump_ms)
    [t] = plugin_scenarios.truth(spec)
    assert t.gpu is not None
    run, records = _run(spec, version, tmp_path)
    [f] = analyze_records(records).stragglers
    assert (f.hostname, f.pid, f.kind) == (*run.processes[(t.node, t.gpu)], "compute")
    assert f.coverage["compared_by"] == "lateness"
    assert abs(f.slowdown - 1.5) / 1.5 <= 0.15


def test_a_strong_stragglers_neighbour_waiting_in_ops_2_30_does_not_write_is_not_named(
    tmp_path: Path,
) -> None:
    """2.30 writes no op under 8 KiB: the DP neighbour of a 2x straggler waits for it in the 4 KiB gradient bucket,
    time that reads as its own compute (some 3 % of a step). It shares a communicator with a finding costing the job
    far more, so it is that one's victim, not a straggler: only the straggler is named."""
    spec = plugin_scenarios.CLASSES["compute_2.0"]("ring", 2, 1000.0)
    [t] = plugin_scenarios.truth(spec)
    assert t.gpu is not None
    run, records = _run(spec, "2.30.7", tmp_path, speedup=None)
    found = analyze_records(records).stragglers
    assert [(f.hostname, f.pid, f.kind) for f in found] == [(*run.processes[(t.node, t.gpu)], "compute")]
    assert found[0].coverage["ops_written_share"] < 0.99  # the neighbour's waits went unwritten


def test_an_unknown_plugin_version_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(PluginError, match=r"unknown plugin version '2\.31\.0'"):
        run_job_through_plugin(dataclasses.replace(_job("2.30.7", 1000.0), steps=1), "2.31.0", tmp_path)


def test_a_hung_process_is_named_from_the_sampled_plugins_files(tmp_path: Path) -> None:
    """A rank's process stops (its dump thread with it) while every other rank blocks behind it: from the 2.29.3
    plugin's own files at 1 s dumps, the hang finder names that process and no other."""
    spec = dataclasses.replace(hang("sampled", 1), dump_interval_ms=1000.0)
    run, records = _run(spec, "2.29.3", tmp_path)
    [hung] = truth(spec)
    records.sort(key=lambda r: r.dump_ts_us)
    finder = HangFinder(3.0)
    for r in records:
        finder.add(r, r.dump_ts_us * 1000, r.hostname)
    named = {
        (x.hostname, x.pid)
        for h in finder.hangs((records[-1].dump_ts_us + 5_000_000) * 1000)
        for x in h.lagging
    }
    member = next(
        m for m in run.processes if (spec.hostname(m[0]), spec.pid(*m)) == (hung.hostname, hung.pid)
    )
    assert named == {run.processes[member]}
