"""The demo's node-side sources read back through the agent's own parsers (ranksight/simulate/cluster.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ranksight.agent.collectors.gpu.sysfs import read_amdgpu_sysfs
from ranksight.agent.collectors.nic.sysfs import read_nics
from ranksight.agent.collectors.ras.parse_json import parse_status_json
from ranksight.agent.collectors.ras.parse_text import parse_status_text
from ranksight.formats.inspector import parse_op
from ranksight.simulate.cluster import US, LiveJob, NodeSysfs, ras_status_json, ras_status_text
from ranksight.simulate.inspector import JobSpec


def _job(tmp_path: Path) -> LiveJob:
    return LiveJob(
        JobSpec(nodes=4, gpus_per_node=2, steps=20, start_us=1_000 * US, run_tag="t"), tmp_path / "dump"
    )


def test_lines_are_written_once_their_dump_time_has_passed(tmp_path: Path) -> None:
    job = _job(tmp_path)
    assert job.release(999 * US) == 0 and sorted(p.name for p in job.dump_root.iterdir()) == [
        "node000", "node001", "node002", "node003"]  # fmt: skip
    first = job.release(1_000 * US + 500_000)
    assert 0 < first and not job.done
    files = sorted(job.dump_dir(1).iterdir())
    assert [f.name for f in files] == ["node001-pid40097.log", "node001-pid40098.log"]
    records = [parse_op(line) for line in files[0].read_text().splitlines()]
    assert all(r.hostname == "node001" and r.dump_ts_us <= 1_000 * US + 500_000 for r in records)
    assert first + job.release(job.end_us) == sum(
        len(f.read_text().splitlines()) for f in job.dump_root.glob("*/*.log")
    )
    assert job.done and max(job.counts.values()) == 20


def test_ras_status_parses_and_shows_the_missing_rank(tmp_path: Path) -> None:
    job = _job(tmp_path)
    job.release(job.end_us)
    healthy = parse_status_json(ras_status_json(job, set()))
    assert healthy.health == "ok" and not healthy.mismatches
    assert {c.op_counts.get("AllReduce") for c in healthy.communicators if c.size == 2 and c.hash} >= {20}
    degraded = parse_status_json(ras_status_json(job, {(3, 1)}))
    assert degraded.health == "degraded"
    assert [(p.host, p.pid, p.gpus) for p in degraded.missing_processes] == [("node003", 40292, [1])]


def test_ras_text_status_says_what_the_json_says(tmp_path: Path) -> None:
    job = _job(tmp_path)
    job.release(job.end_us)
    healthy = parse_status_text(ras_status_text(job, set()))
    assert (healthy.health, healthy.communicators, healthy.nodes) == ("ok", [], job.spec.nodes)
    text = parse_status_text(ras_status_text(job, {(3, 1)}))
    body = parse_status_json(ras_status_json(job, {(3, 1)}))
    assert text.health == body.health == "degraded"
    assert [(p.host, p.pid, p.gpus, p.comms) for p in text.missing_processes] == [
        (p.host, p.pid, p.gpus, p.comms) for p in body.missing_processes
    ]
    assert {c.hash: c.missing_ranks for c in text.communicators} == {
        c.hash: c.missing_ranks for c in body.communicators if c.missing_ranks
    }


def test_sysfs_tree_reads_as_gpus_and_an_rdma_port_whose_counters_advance(tmp_path: Path) -> None:
    tree = NodeSysfs(tmp_path / "sys", gpus=2, slow_gpu=1, nic_errors_per_s=4.0)
    tree.write(100.0)
    gpus = read_amdgpu_sysfs(tree.root)
    assert [(g.index, g.sclk_hz, g.power_w) for g in gpus] == [(0, 2.1e9, 712.0), (1, 1.3e9, 402.0)]
    [before] = read_nics(tree.root)
    tree.write_counters(102.0)  # the demo's counter thread, between the job loop's writes
    [after] = read_nics(tree.root)
    assert after.counters["symbol_error"] - before.counters["symbol_error"] == 8
    assert (after.tx_bytes or 0) - (before.tx_bytes or 0) == 2 * tree.nic_bytes_per_s


async def test_demo_status_lists_the_lost_rank_before_peer_dead_is_sent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:

    from ranksight.commands.demo import Demo, _job_spec
    from ranksight.settings import load_settings
    from ranksight.simulate.ras_server import FakeRasServer

    demo = Demo(load_settings(None, state_dir=tmp_path), 4, 0.0)
    job = LiveJob(_job_spec(4, 1), tmp_path / "inspector")
    seen: list[list[int | None]] = []

    async def push_event(self: FakeRasServer, event: object) -> None:
        seen.append([p.pid for p in parse_status_text(self.status_text).missing_processes])

    monkeypatch.setattr(FakeRasServer, "push_event", push_event)
    await demo._lose_rank(job)
    assert seen == [[job.spec.pid(3, 5)]] * 4  # every endpoint already says so


def test_demo_nic_counters_keep_moving_while_the_job_loop_is_slow(tmp_path: Path) -> None:
    """Issue 47: 141 of 656 demo NIC rows had ``tx_bps=0`` between 171 and 177 Gbit/s. The counters were written only
    by the job loop, which under load took longer than the NIC collector's 2 s interval: two samples saw the same
    counters (0 bit/s), the next twice the traffic. Read here as the agent does, every 0.5 s, with the job loop
    stalled throughout: every rate is the simulated traffic, none is zero."""
    import threading
    import time

    from ranksight.agent.collectors.nic.rates import RateTracker
    from ranksight.commands.demo import advance_counters

    tree = NodeSysfs(tmp_path / "sys", gpus=1)
    tree.write(time.time())  # the job loop's one write; it does not come back during the test
    stop, tracker, rates = threading.Event(), RateTracker(), []
    writer = threading.Thread(target=advance_counters, args=([tree], stop))
    writer.start()
    try:
        for _ in range(6):
            [nic] = tracker.update(read_nics(tree.root), time.monotonic())
            rates.append(nic.tx_bps)
            time.sleep(0.5)  # the reading thread busy or asleep: the counters move regardless
    finally:
        stop.set()
        writer.join()
    expected = tree.nic_bytes_per_s * 8
    assert rates[0] is None and all(
        r is not None and 0.3 * expected < r < 1.7 * expected for r in rates[1:]
    ), rates
