"""Hang forensics live: a real PyTorch gloo job (three processes) -> ranksight.client dump thread -> real agent ->
real NATS -> aggregator: the heartbeat alert asks for dumps and ``flight_recorder_hang`` names the rank, group, op,
seq id and frame, for each failure shape; a healthy job dumped on demand has no finding."""

from __future__ import annotations

import json
import socket
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ranksight.settings import Settings
from tests.fr_job import start_ranks
from tests.support import agent, aggregator, run_cli_async, settings_env, wait_for

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


async def started(agg) -> None:  # type: ignore[no-untyped-def]
    """Every rank stepping: torch's start-up takes seconds, and much longer on a loaded machine."""
    await wait_for(
        lambda: len([st for st in agg.state.app.ranks.values() if st.step is not None]) == 3, timeout=120
    )


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


DEFAULT_GROUP = ("0:default_pg", "gloo:all_reduce", 4)
EXPECTED = {
    # scenario: (kind, rank, frame function of the named rank, (group, collective, seq) it is named in)
    "stopped": ("collective_hang", 2, "wait_for_results", DEFAULT_GROUP),
    "python_stuck": ("collective_hang", 2, "next_batch", DEFAULT_GROUP),
    "mismatch": ("collective_mismatch", 1, "train", DEFAULT_GROUP),
    "killed": ("rank_without_dump", 2, None, DEFAULT_GROUP),
    # rank 1 never enters the subgroup [0, 1]'s broadcast; rank 0, held up in it, misses the next all_reduce too
    "subgroup": ("collective_hang", 1, "wait_for_results", ("1", "gloo:broadcast", 4)),
}


@pytest.mark.parametrize("scenario", sorted(EXPECTED))
async def test_failure_shape_named_live(scenario: str, hang_settings: Settings, job) -> None:  # type: ignore[no-untyped-def]
    kind, rank, function, (group, collective, seq) = EXPECTED[scenario]
    async with aggregator(hang_settings) as agg, agent(hang_settings, only=["app"]):
        mark = job(scenario)
        await started(agg)
        (alert,) = await wait_for(lambda: [a for a in firing(agg, "flight_recorder_hang") if a.rank == rank],
                                  timeout=45)  # fmt: skip
        latency_s = time.time() - int(mark.read_text()) / 1e9
        alerts = firing(agg, "flight_recorder_hang")
    ev = alert.evidence
    assert (alert.job, ev["kind"], ev["process_group"], ev["seq"]) == ("J7", kind, group, seq)
    assert ev["collective"] == collective and alert.node == "node-a"
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
        await started(agg)
        await wait_for(lambda: len([st for st in agg.state.app.ranks.values() if (st.step or 0) >= 5]) == 3,
                       timeout=30)  # fmt: skip
        task = agg.hang_forensics.start(agg, agg.settings.cluster, "J7")
        assert task is not None
        report = await task
        assert report is not None and report.errors == []
        assert report.report.ranks_seen == [0, 1, 2] and report.report.findings == []
        await agg.tick(time.time_ns())
        assert not firing(agg, "flight_recorder_hang") and not firing(agg, "rank_heartbeat_overdue")


async def test_job_dump_and_evidence_commands(hang_settings: Settings, job, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    async with aggregator(hang_settings) as agg, agent(hang_settings, only=["app"]):
        job("stopped")
        await started(agg)
        await wait_for(lambda: [a for a in firing(agg, "flight_recorder_hang") if a.rank == 2], timeout=45)
        env = settings_env(hang_settings)
        proc = await run_cli_async("job", "dump", "J7", "--json", env=env, timeout=40)
        assert proc.returncode == 0, proc.stderr
        out = json.loads(proc.stdout)
        (row,) = out["rows"]
        assert (row["kind"], row["rank"], row["seq"], row["node"]) == ("collective_hang", 2, 4, "node-a")
        assert row["where"].startswith("wait_for_results at ") and out["meta"]["ranks_seen"] == [0, 1, 2]
        table = await run_cli_async("job", "dump", "J7", env=env, timeout=40)
        assert (
            table.returncode == 0 and "collective_hang" in table.stdout and "3 ranks dumped" in table.stderr
        )
        unknown = await run_cli_async("job", "dump", "no-such-job", env=env, timeout=40)
        assert unknown.returncode == 1 and "no rank of job 'no-such-job'" in unknown.stderr
        bundle = tmp_path / "evidence.tar.gz"
        proc = await run_cli_async("job", "evidence", "J7", "-o", str(bundle), env=env, timeout=60)
        assert proc.returncode == 0, proc.stderr
    with tarfile.open(bundle) as tar:
        names = set(tar.getnames())
        report = json.load(tar.extractfile("evidence/hang_report.json"))  # type: ignore[arg-type]
        alerts = json.load(tar.extractfile("evidence/alerts.json"))  # type: ignore[arg-type]
        stacks = tar.extractfile("evidence/stacks.txt").read().decode()  # type: ignore[union-attr]
    assert {"evidence/alerts.json", "evidence/ras_jobs.json", "evidence/ras_comms.json", "evidence/gpus.json",
            "evidence/nics.json", "evidence/inspector_tail.json"} <= names  # fmt: skip
    assert ", in wait_for_results\n" in stacks.split("rank 2, pid ")[1] and stacks.count("(main):") == 3
    assert len([n for n in names if n.startswith("evidence/dumps/rank")]) == 3
    assert report["findings"][0]["missing_ranks"] == [2]
    assert {a["rule"] for a in alerts} >= {"flight_recorder_hang", "rank_heartbeat_overdue"}
    with tarfile.open(bundle) as tar:  # the bundle's dumps are input for the offline match too
        tar.extractall(tmp_path / "x", filter="data")
    offline = await run_cli_async(
        "analyze", "hang", str(tmp_path / "x" / "evidence" / "dumps"), "--json", env=env
    )
    assert offline.returncode == 1, offline.stderr
    (finding,) = json.loads(offline.stdout)["findings"]
    assert (finding["missing_ranks"], finding["seq"]) == ([2], 4)
    assert finding["frames"]["2"]["where"].startswith("wait_for_results at ")


async def test_torch_worker_servers_answer_through_the_agent(hang_settings: Settings, tmp_path: Path) -> None:
    """The agent also asks torch's own worker servers (``torch_worker_sockets``): each rank answers twice (its
    client, its worker server), one process, counted once and not reported as a conflict."""
    sockets = tmp_path / "sockets"
    sockets.mkdir()
    app = hang_settings.agent.collectors.app
    app.torch_worker_sockets = str(sockets / "worker*.sock")
    argv = ["--scenario", "stopped", "--port", str(free_port()), "--socket", str(app.socket_path), "--job", "J7",
            "--worker-sockets", str(sockets)]  # fmt: skip
    procs = start_ranks(argv, 3, "J7")
    try:
        async with aggregator(hang_settings) as agg, agent(hang_settings, only=["app"]):
            await started(agg)
            (alert,) = await wait_for(lambda: firing(agg, "flight_recorder_hang"), timeout=45)
            processes, error = await agg.hang_forensics._ask(agg, agg.settings.cluster, "node-a", "J7")
            report = agg.state.forensics.reports[(agg.settings.cluster, "J7")]
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(timeout=10)
    assert error is None
    served = {p["rank"]: p for p in processes if str(p.get("source", "")).startswith("torch worker server")}
    assert sorted(served) == [0, 1, 2] and all(p["dump"] is not None for p in served.values())
    assert {p["pid"] for p in served.values()} == {proc.pid for proc in procs}
    assert (alert.rank, alert.evidence["seq"]) == (2, 4) and report.errors == []
