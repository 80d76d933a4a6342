"""Hang forensics live: a real PyTorch gloo job (three processes) -> ranksight.client dump thread -> real agent ->
real NATS -> aggregator: the heartbeat alert asks for dumps and ``flight_recorder_hang`` names the rank, group, op,
seq id and frame, for each failure shape; a healthy job dumped on demand has no finding."""

from __future__ import annotations

import socket
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ranksight.core.config import Settings
from tests.fr_job import start_ranks
from tests.support import agent, aggregator, wait_for

JOB_FILE = "tests/fr_job.py"


@pytest.fixture
def hang_settings(settings: Settings) -> Iterator[Settings]:
    with tempfile.TemporaryDirectory(prefix="rs-hang-") as d:
        app = settings.agent.collectors.app
        app.socket_path = Path(d) / "app.sock"
        # torch's start-up on a busy 2-core machine takes seconds: a generous first heartbeat, a short hang threshold
        app.heartbeat_timeout_s, app.heartbeat_initial_timeout_s = 4.0, 120.0
        yield settings


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def firing(agg, rule: str) -> list:  # type: ignore[no-untyped-def]
    return [a for a in agg.engine.active.values() if a.rule == rule]


@pytest.fixture
def job(hang_settings: Settings, tmp_path: Path):  # type: ignore[no-untyped-def]
    procs = []

    def start(scenario: str) -> Path:
        mark = tmp_path / "hang-start"
        argv = ["--scenario", scenario, "--port", str(free_port()), "--socket",
                str(hang_settings.agent.collectors.app.socket_path), "--job", "J7", "--mark", str(mark)]  # fmt: skip
        procs.extend(start_ranks(argv, 3, "J7"))
        return mark

    yield start
    for proc in procs:
        proc.kill()
        proc.wait(timeout=10)


EXPECTED = {
    # scenario: (kind, rank, frame function of the named rank)
    "stopped": ("collective_hang", 2, "wait_for_results"),
    "python_stuck": ("collective_hang", 2, "next_batch"),
    "mismatch": ("collective_mismatch", 1, "train"),
    "killed": ("rank_without_dump", 2, None),
}


@pytest.mark.parametrize("scenario", sorted(EXPECTED))
async def test_failure_shape_named_live(scenario: str, hang_settings: Settings, job) -> None:  # type: ignore[no-untyped-def]
    kind, rank, function = EXPECTED[scenario]
    async with aggregator(hang_settings) as agg, agent(hang_settings, only=["app"]):
        mark = job(scenario)
        (alert,) = await wait_for(lambda: [a for a in firing(agg, "flight_recorder_hang") if a.rank == rank],
                                  timeout=50)  # fmt: skip
        latency_s = time.time() - int(mark.read_text()) / 1e9
        alerts = firing(agg, "flight_recorder_hang")
    ev = alert.evidence
    assert (alert.job, ev["kind"], ev["process_group"], ev["seq"]) == ("J7", kind, "0:default_pg", 4)
    assert ev["collective"] == "gloo:all_reduce" and alert.node == "node-a"
    if scenario != "killed":  # a gloo peer's death may take a second rank down with it (NCCL's would wait)
        assert ev["ranks_seen"] == [0, 1, 2] and len(alerts) == 1
    if function is not None:
        frame = ev["frames"][str(rank)]
        assert frame["where"].startswith(f"{function} at ") and JOB_FILE in frame["where"], frame
        assert isinstance(ev["pid"], int) and ev["host"] == socket.gethostname()
        assert f"at {function} at " in alert.summary
    else:
        assert 2 in ev["ranks_missing_dump"] and "rank 2 gave no dump" in alert.summary
    if kind == "collective_mismatch":
        assert ev["verdicts"]["1"]["verdict"] == "COLLECTIVE_TYPE_MISMATCH"
    assert ev["corroboration"]["verdict"] == "no corroborating data"  # gloo: no RAS, no Inspector to ask
    assert latency_s < 30, latency_s
    print(f"{scenario}: named {latency_s:.1f} s after the hang started", file=sys.stderr)


async def test_healthy_job_dumped_on_demand_has_no_finding(hang_settings: Settings, job) -> None:  # type: ignore[no-untyped-def]
    async with aggregator(hang_settings) as agg, agent(hang_settings, only=["app"]):
        job("healthy")
        await wait_for(lambda: len([st for st in agg.state.app.ranks.values() if (st.step or 0) >= 5]) == 3,
                       timeout=50)  # fmt: skip
        task = agg.hang_forensics.start(agg, agg.settings.cluster, "J7")
        assert task is not None
        report = await task
        assert report is not None and report.errors == []
        assert report.report.ranks_seen == [0, 1, 2] and report.report.findings == []
        await agg.tick(time.time_ns())
        assert not firing(agg, "flight_recorder_hang") and not firing(agg, "rank_heartbeat_overdue")
