"""Real nats-server, real agents, the fake RAS server over TCP, the aggregator with its DuckDB file:
lease takeover between two agents, and the job's alert lifecycle through ingest, restart and replay."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import duckdb
import nats.errors

from ranksight.agent.collectors.ras.jobid import derived_job_id
from ranksight.agent.runtime import AgentRuntime
from ranksight.settings import Settings
from ranksight.simulate.ras_server import PROFILES, FakeRasServer
from tests.conftest import FIXTURES
from tests.ras_support import fake_proc
from tests.support import agent, aggregator, run_cli_async, settings_env, wait_for

RAS = FIXTURES / "ras"
FINALIZED_TEXT = (
    (RAS / "upstream-server/ref_2.28.9_text_healthy.txt").read_bytes().replace(b"RUNNING", b"FINALIZE")
)
HEALTHY_TEXT = (RAS / "upstream-server/ref_2.28.9_text_healthy.txt").read_bytes()
# The text twin of nccl_2.29.1_json_status_docs_sample_missing_rank.json, in the layout of the upstream captures.
MISSING_TEXT = b"""NCCL version 2.29.1 compiled with CUDA 12.9
CUDA runtime version 12090, driver version 13000

Job summary
===========

  Nodes  Processes         GPUs  Processes     GPUs
(total)   per node  per process    (total)  (total)
      1          2            1          2        2

Communicators... (0.001s)
=============

Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors
    #  in group  per comm  per node  per comm  in group
    0         1         1         2         2         1   RUNNING  INCOMPLETE

Errors
======

INCOMPLETE
  Missing communicator data from 1 job process
  Process 1524345 on node 172.16.64.245 managing GPU 1

#0-0 (ae94423cfbb2ef4a) INCOMPLETE
  Missing communicator data from 1 rank
  Rank 1 -- GPU 1 managed by process 1524345 on node 172.16.64.245

Warnings
========

"""


def ras_settings(settings: Settings, server: FakeRasServer, proc: Path, node: str) -> Settings:
    s = settings.model_copy(deep=True)
    s.agent.node = node
    s.agent.collectors.ras = s.agent.collectors.ras.model_copy(update={
        "addr": server.address, "interval_s": 0.2, "ttl_s": 2.0, "lease_ttl_s": 1.0, "proc_root": proc,
        "timeout_s": 2.0})  # fmt: skip
    return s


def holder(rt: AgentRuntime) -> bool:
    assert rt.ctx is not None
    return rt.ctx.collectors["ras"].lease.revision is not None  # type: ignore[attr-defined]


async def test_lease_takeover_between_two_agents(settings: Settings, tmp_path: Path) -> None:
    healthy = (RAS / "nccl_2.28.9_json_status_healthy_2rank.json").read_bytes()
    async with FakeRasServer(PROFILES["2.29"], HEALTHY_TEXT, healthy) as server:
        proc = fake_proc(tmp_path / "proc", server.port, {"SLURM_JOB_ID": "777"})
        stack_a, stack_b = contextlib.AsyncExitStack(), contextlib.AsyncExitStack()
        a = await stack_a.enter_async_context(
            agent(ras_settings(settings, server, proc, "node-a"), only=["ras"])
        )
        b = await stack_b.enter_async_context(
            agent(ras_settings(settings, server, proc, "node-b"), only=["ras"])
        )
        try:
            await wait_for(lambda: server.statuses_served >= 3, timeout=10)
            assert holder(a) != holder(b)  # exactly one poller per job
            first, other = (a, b) if holder(a) else (b, a)
            assert first.ctx is not None
            collector = first.ctx.collectors["ras"]

            async def silent() -> None:  # the holder dies without releasing: only the KV TTL frees the lease
                return None

            collector.lease.release = silent  # type: ignore[attr-defined,method-assign]
            await (stack_a if first is a else stack_b).aclose()
            served = server.statuses_served
            await wait_for(lambda: holder(other), timeout=8)
            await wait_for(lambda: server.statuses_served >= served + 2, timeout=5)
            assert server.max_concurrent == 1  # never two polls at once against the endpoint
        finally:
            await stack_a.aclose()
            await stack_b.aclose()


async def test_job_alert_lifecycle_through_ingest_and_replay(settings: Settings, tmp_path: Path) -> None:
    missing = (RAS / "nccl_2.29.1_json_status_docs_sample_missing_rank.json").read_bytes()
    doc = json.loads(missing)
    doc["communicators"][0].update(ranks_count=2, missing_ranks_count=0, missing_ranks=[])
    doc["communicators"][0]["ranks"].append(dict(doc["communicators"][0]["ranks"][0], rank=1, pid=1524345))
    for rank in doc["communicators"][0]["ranks"]:
        rank["status"]["finalize_called"] = True
    finalized = json.dumps(doc, indent=2).encode()
    server = await FakeRasServer(PROFILES["2.29"], MISSING_TEXT, missing).start()
    proc = fake_proc(tmp_path / "proc", server.port, {"SLURM_JOB_ID": "42"})
    s = ras_settings(settings, server, proc, "node-a")
    try:
        async with aggregator(s) as agg, agent(s, only=["ras"]):
            await wait_for(lambda: "rank_missing" in {a.rule for a in agg.engine.active.values()}, timeout=10)
            job = agg.state.jobs.jobs[("test", "slurm-42")]
            assert job.health == "degraded" and job.state == "running"
            proc_out = await run_cli_async("jobs", "--json", env=settings_env(s))
            assert proc_out.returncode == 0, proc_out.stderr
            rows = json.loads(proc_out.stdout)["jobs"]
            assert [(r["job"], r["health"], r["ras_health"], r["state"]) for r in rows] == [
                ("slurm-42", "warning", "degraded", "running")  # the one vocabulary; RAS's own word beside it
            ]
            proc_out = await run_cli_async("comms", "--json", env=settings_env(s))
            assert json.loads(proc_out.stdout)["comms"][0]["missing_ranks"] == [1]
            server.status_json = finalized  # ranks FINALIZE, then the endpoint closes: a normal end
            server.status_text = FINALIZED_TEXT
            await wait_for(
                lambda: "rank_missing" not in {a.rule for a in agg.engine.active.values()}, timeout=10
            )
            await server.stop()
            await wait_for(lambda: agg.state.jobs.jobs[("test", "slurm-42")].state == "ended", timeout=10)
            await wait_for(lambda: "job_ended" in {a.rule for a in agg.engine.active.values()}, timeout=5)
            ended = next(a for a in agg.engine.active.values() if a.rule == "job_ended")
            assert ended.severity == "info" and ended.evidence["normal"] is True
        con = duckdb.connect(str(s.db_path()), read_only=True)
        fired = con.execute("SELECT rule, state FROM alerts ORDER BY updated_at").fetchall()
        (health,) = con.execute("SELECT health FROM v_job_health WHERE job_id = 'slurm-42'").fetchone()
        con.close()
        assert fired.count(("rank_missing", "firing")) == 1 and ("rank_missing", "resolved") in fired
        assert {r for r, st in fired if st == "firing"} <= {"rank_missing", "job_started", "job_ended"}
        assert health == "ok"
        async with aggregator(s) as agg:  # restart: history replays, nothing already known fires again
            started = agg.state.now_ns
            await wait_for(lambda: agg.state.now_ns > started + 500_000_000, timeout=5)  # several ticks ran
        con = duckdb.connect(str(s.db_path()), read_only=True)
        assert con.execute("SELECT rule, state FROM alerts ORDER BY updated_at").fetchall() == fired
        con.close()
    finally:
        await server.stop()


async def test_a_lease_timeout_fails_one_poll_and_keeps_the_monitor(
    settings: Settings, tmp_path: Path
) -> None:
    """Under load the lease's KV request can time out: that poll fails, the MONITOR connection stays (a restarted
    collector would reopen it and miss the events in between)."""
    healthy = (RAS / "nccl_2.28.9_json_status_healthy_2rank.json").read_bytes()
    async with FakeRasServer(PROFILES["2.29"], HEALTHY_TEXT, healthy) as server:
        proc = fake_proc(tmp_path / "proc", server.port, {"SLURM_JOB_ID": "9"})
        async with agent(ras_settings(settings, server, proc, "node-a"), only=["ras"]) as rt:
            assert rt.ctx is not None
            collector = rt.ctx.collectors["ras"]
            real, calls = collector.lease.hold, []  # type: ignore[attr-defined]

            async def flaky(job: str) -> bool:
                calls.append(job)
                if len(calls) == 3:
                    raise nats.errors.TimeoutError
                return bool(await real(job))

            collector.lease.hold = flaky  # type: ignore[attr-defined]
            await wait_for(lambda: len(calls) >= 6, timeout=10)
            assert collector.health.errors >= 1  # the failed poll is counted
            assert server.commands.count("MONITOR lifecycle") == 1


async def test_a_job_whose_monitor_identified_it_first_still_gets_its_job_wide_id(
    settings: Settings, tmp_path: Path
) -> None:
    """A new job: the MONITOR loop names it by this node's endpoint before the first poll; that poll must still ask for
    the full communicator list, or every node's agent would report the job under its own id."""
    healthy = (RAS / "nccl_2.28.9_json_status_healthy_2rank.json").read_bytes()
    async with FakeRasServer(PROFILES["2.29"], HEALTHY_TEXT, healthy) as server:
        s = ras_settings(settings, server, tmp_path / "no-proc", "node-a")
        s.agent.collectors.ras = s.agent.collectors.ras.model_copy(
            update={"interval_s": 60.0, "monitor": False}
        )
        async with agent(s, only=["ras"]) as rt:
            assert rt.ctx is not None
            collector = rt.ctx.collectors["ras"]
            await wait_for(lambda: collector.polls >= 1, timeout=10)  # type: ignore[attr-defined]
            derived = collector.job_id  # type: ignore[attr-defined]
            assert derived == derived_job_id(["0x514e98cf4e44862b"])
            await collector._job_gone()  # type: ignore[attr-defined]  # the job ended; a new one starts
            collector.job_id = collector._identify()  # type: ignore[attr-defined]  # what the MONITOR loop does
            collector.polls = 1  # type: ignore[attr-defined]  # not a detail poll by count
            await collector.poll_once()  # type: ignore[attr-defined]
            assert collector.job_id == derived  # type: ignore[attr-defined]
