"""RAS DIAGNOSTICS and CONTROL PROFILER_MASK (2.31) against the fake server over real TCP, each release's
answers as the upstream server gives them (``simulate.ras_server``): a run, BUSY for a concurrent one, the JSON-format
refusal, older servers' ``Unknown command``; the hosts behind a finding resolved from a JSON status; the
``ranksight ras diagnostics`` and ``ranksight ras profile`` commands and their exit codes."""

from __future__ import annotations

import asyncio
import json
import types
from pathlib import Path
from typing import Any

import pytest

from ranksight.agent.collectors.ras.client import RasClient
from ranksight.agent.collectors.ras.diagnostics import run_diagnostics
from ranksight.agent.collectors.ras.errors import RasReplyError
from ranksight.agent.collectors.ras.parse_diagnostics import parse_diagnostics
from ranksight.aggregator.analysis.ras_diagnostics import diagnostics_rules
from ranksight.settings import Settings
from ranksight.simulate.cluster import ras_status_json
from ranksight.simulate.inspector import JobSpec, comms
from ranksight.simulate.ras_server import PROFILES, FakeRasServer
from tests.conftest import FIXTURES
from tests.ras_diagnostics_replies import INFO, XID_DOC, reply
from tests.ras_support import fake_proc
from tests.support import agent, aggregator, run_cli_async, settings_env, wait_for

DIAG = FIXTURES / "ras/diagnostics"
HEALTHY = (DIAG / "nccl_2.32_diagnostics_healthy_4node_32rank.txt").read_bytes()
INCONSISTENT = (DIAG / "nccl_2.32_diagnostics_inconsistent_4node_32rank.txt").read_bytes()
TEXT = (FIXTURES / "ras/upstream-server/ref_2.30.7_text_full.txt").read_bytes()


def fake(
    profile: str, reply_body: bytes = HEALTHY, status_json: bytes | None = None, **kw: Any
) -> FakeRasServer:
    return FakeRasServer(PROFILES[profile], TEXT, status_json, diagnostics_reply=reply_body, **kw)


async def raw_session(server: FakeRasServer, *commands: str) -> bytes:
    """What the server sends back to ``commands`` until it closes the connection or goes quiet."""
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write("".join(f"{c}\n" for c in commands).encode())
    await writer.drain()
    out = b""
    try:
        while chunk := await asyncio.wait_for(reader.read(65536), 0.5):
            out += chunk
    except TimeoutError:
        pass
    writer.close()
    return out


@pytest.mark.parametrize("profile", ["2.31", "2.32"])  # 2.31.2's client_support.cc already has the command
async def test_a_run_and_a_concurrent_one_answered_busy(profile: str) -> None:
    async with fake(profile, INCONSISTENT, diagnostics_delay_s=0.5) as server:
        client = RasClient(server.address)
        running = asyncio.create_task(client.diagnostics())
        await asyncio.sleep(0.1)  # the first run is gathering
        second = await client.diagnostics()
        first = await running
        assert first == INCONSISTENT
        assert second == b"BUSY: diagnostics already in progress\n"
        assert parse_diagnostics(second).status == "busy"
        assert server.commands.count("DIAGNOSTICS") == 2


async def test_the_server_answers_json_clients_with_an_error_and_closes() -> None:
    async with fake("2.32") as server:
        out = await raw_session(server, "CLIENT PROTOCOL 2", "SET FORMAT json", "DIAGNOSTICS", "STATUS")
        assert (
            out == b"SERVER PROTOCOL 2\nOK\nERROR: diagnostics only supports text output\n"
        )  # closed: no status


@pytest.mark.parametrize("profile", ["2.24", "2.28.9", "2.29", "2.30", "rccl"])
async def test_releases_before_2_31_do_not_know_diagnostics(profile: str) -> None:
    async with fake(profile) as server:
        report = parse_diagnostics(await RasClient(server.address).diagnostics())
        assert (report.status, report.message) == ("unsupported", "ERROR: Unknown command DIAGNOSTICS")


async def test_control_profiler_mask_on_2_31_and_later() -> None:
    async with fake("2.31") as server:
        client = RasClient(server.address)
        await client.set_profiler_mask("0x46")
        await client.set_profiler_mask("none")
        with pytest.raises(RasReplyError, match="Invalid profiler mask value 'bogus'"):
            await client.set_profiler_mask("bogus")
        assert server.profiler_masks == [0x46, 0]
        out = await raw_session(
            server, "CONTROL bogus", "control profiler_mask GROUP,coll", "CONTROL PROFILER_MASK", "CONTROL",
            "control  foo bar ", "CONTROL PROFILER_MASK   coll ", "CONTROL PROFILER_MASK coll,,p2p",
        )  # fmt: skip
        # rasClientEventLoop: "control " and "profiler_mask " are matched with their spaces, the subcommand is echoed
        # whole (after the blanks that follow CONTROL), the value after its leading blanks, trailing ones kept
        assert out == (b"ERROR: Unknown CONTROL subcommand 'bogus'\nOK\n"
                       b"ERROR: Unknown CONTROL subcommand 'PROFILER_MASK'\n"
                       b"ERROR: Unknown command CONTROL\n"
                       b"ERROR: Unknown CONTROL subcommand 'foo bar '\n"
                       b"ERROR: Invalid profiler mask value 'coll '\nOK\n")  # fmt: skip
        assert server.profiler_masks[-2:] == [3, 6]


@pytest.mark.parametrize("profile", ["2.24", "2.29", "2.30", "rccl"])
async def test_releases_before_2_31_do_not_know_control(profile: str) -> None:
    async with fake(profile) as server:
        with pytest.raises(RasReplyError) as caught:
            await RasClient(server.address).set_profiler_mask("all")
        assert caught.value.unknown_command
        assert caught.value.reply == "ERROR: Unknown command CONTROL PROFILER_MASK all"


async def test_the_hosts_that_differ_are_named_from_a_json_status() -> None:
    spec = JobSpec(nodes=4, gpus_per_node=2, pp=2)
    phases = comms(spec)
    job: Any = types.SimpleNamespace(
        spec=spec, phases=phases, counts={c.comm_id: 1 for p in phases for c in p}
    )
    dp = max((c for p in phases for c in p), key=lambda c: len({node for node, _ in c.members}))
    comm = int(dp.comm_id, 16)
    lines = [f"{INFO}CUDA driver version: mismatch across 2 ranks in comm 0x{comm:x}, rank(s) {{1}} differ from "
             f"rank 0 (13000)"]  # fmt: skip
    async with fake("2.32", reply("node000", 7, lines, 3.0, 8), ras_status_json(job, set())) as server:
        report = await run_diagnostics(RasClient(server.address))
    [finding] = report.findings
    assert finding.kind == "cuda_driver" and finding.hosts == [spec.hostname(dp.members[1][0])]


async def test_the_commands_and_their_exit_codes() -> None:
    async with fake("2.32", INCONSISTENT) as server:
        bad = await run_cli_async("ras", "diagnostics", "--addr", server.address, "--json")
        assert bad.returncode == 1
        out = json.loads(bad.stdout)
        assert out["status"] == "ok" and {f["kind"] for f in out["findings"]} >= {
            "cuda_driver",
            "xid",
            "nccl_env",
        }
        server.diagnostics_reply = HEALTHY
        good = await run_cli_async("ras", "diagnostics", "--addr", server.address)
        assert good.returncode == 0 and "status ok" in good.stdout
        on = await run_cli_async("ras", "profile", "--addr", server.address, "on", "--json")
        assert (
            on.returncode == 0 and json.loads(on.stdout)["mask"] == 0x46 and server.profiler_masks == [0x46]
        )
        usage = await run_cli_async("ras", "profile", "--addr", server.address, "sometimes")
        assert usage.returncode == 2 and server.profiler_masks == [0x46]
    async with fake("2.30") as old:
        refused = await run_cli_async("ras", "profile", "--addr", old.address, "off")
        assert refused.returncode == 1 and "NCCL 2.31 or later" in refused.stderr
        unsupported = await run_cli_async("ras", "diagnostics", "--addr", old.address)
        assert unsupported.returncode == 1 and "NCCL 2.31 or later" in unsupported.stderr


async def test_the_agent_runs_diagnostics_once_per_job_and_the_rules_name_the_hosts(
    settings: Settings, tmp_path: Path
) -> None:
    """A real agent (lease holder), NATS and aggregator: one diagnostics run for the job, stored as
    ``ras_diagnostics``, and an alert per inconsistency class naming the hosts behind the ranks."""
    spec = JobSpec(nodes=4, gpus_per_node=2, pp=2)
    phases = comms(spec)
    job: Any = types.SimpleNamespace(
        spec=spec, phases=phases, counts={c.comm_id: 1 for p in phases for c in p}
    )
    dp = max((c for p in phases for c in p), key=lambda c: len({node for node, _ in c.members}))
    c = f"0x{int(dp.comm_id, 16):x}"
    lines = [f"{INFO}CUDA driver version: mismatch across 2 ranks in comm {c}, rank(s) {{1}} differ from rank 0 "
             f"(13000)",
             f"{INFO}Xid 79 detected 2 times on host node003. The NVIDIA Xid catalog recommends resetting the affected "
             f"GPU. Follow the documented GPU-reset capabilities and limitations: {XID_DOC}"]  # fmt: skip
    body = ras_status_json(job, set())
    server = fake("2.32", reply("node000", 7, lines, 3.0, 8), body)
    await server.start()
    proc = fake_proc(tmp_path / "proc", server.port, {"SLURM_JOB_ID": "4711"})
    s = settings.model_copy(deep=True)
    s.agent.node = "node-a"
    s.agent.collectors.ras = s.agent.collectors.ras.model_copy(update={
        "addr": server.address, "interval_s": 0.2, "ttl_s": 5.0, "lease_ttl_s": 1.0, "proc_root": proc,
        "timeout_s": 2.0})  # fmt: skip
    try:
        async with aggregator(s) as agg, agent(s, only=["ras"]):
            await wait_for(lambda: _stored_diagnostics(agg) >= 1, timeout=15)
            await wait_for(lambda: server.statuses_served >= 6, timeout=10)  # later polls ask no second run
            assert server.commands.count("DIAGNOSTICS") == 1
            [job_state] = agg.state.jobs.jobs.values()
            assert job_state.diagnostics is not None and job_state.diagnostics.status == "ok"
            conditions = {cond.rule: cond for rule in diagnostics_rules()
                          for cond in rule.evaluate(agg.state, agg.state.now_ns)}  # fmt: skip
            assert set(conditions) == {"ras_diag_versions", "ras_diag_xid"}
            assert conditions["ras_diag_versions"].evidence["hosts"] == [spec.hostname(dp.members[1][0])]
            assert spec.hostname(dp.members[1][0]) in conditions["ras_diag_versions"].summary
            assert conditions["ras_diag_xid"].evidence["hosts"] == ["node003"]
            assert conditions["ras_diag_xid"].job == "slurm-4711"
    finally:
        await server.stop()


def _stored_diagnostics(agg: Any) -> int:
    [row] = agg.store.rows("SELECT count(*) AS n FROM ras_diagnostics")
    return int(row["n"])


async def test_profile_by_job_through_the_aggregator_and_the_polling_agent(
    settings: Settings, tmp_path: Path
) -> None:
    spec = JobSpec(nodes=2, gpus_per_node=2, pp=2)
    phases = comms(spec)
    job: Any = types.SimpleNamespace(
        spec=spec, phases=phases, counts={c.comm_id: 1 for p in phases for c in p}
    )
    server = await fake("2.31", status_json=ras_status_json(job, set())).start()
    proc = fake_proc(tmp_path / "proc", server.port, {"SLURM_JOB_ID": "99"})
    s = settings.model_copy(deep=True)
    s.agent.node = "node-a"
    s.agent.collectors.ras = s.agent.collectors.ras.model_copy(update={
        "addr": server.address, "interval_s": 0.2, "ttl_s": 5.0, "lease_ttl_s": 1.0, "proc_root": proc,
        "timeout_s": 2.0, "profile_control": False})  # fmt: skip
    try:
        async with aggregator(s) as agg:
            async with agent(s, only=["ras"]):
                await wait_for(lambda: any(j.job_id == "slurm-99" for j in agg.state.jobs.live()), timeout=15)
                refused = await run_cli_async(
                    "ras", "profile", "--job", "slurm-99", "on", env=settings_env(s)
                )
                assert refused.returncode == 1 and "profile control is off" in refused.stderr
                assert server.profiler_masks == []
            s.agent.collectors.ras = s.agent.collectors.ras.model_copy(update={"profile_control": True})
            async with agent(s, only=["ras"]):
                await wait_for(lambda: any(j.job_id == "slurm-99" for j in agg.state.jobs.live()), timeout=15)
                done = await run_cli_async(
                    "ras", "profile", "--job", "slurm-99", "off", "--json", env=settings_env(s)
                )
                assert done.returncode == 0, done.stderr
                assert json.loads(done.stdout)["mask"] == 0 and server.profiler_masks == [0]
                unknown = await run_cli_async("ras", "profile", "--job", "nope", "on", env=settings_env(s))
                assert unknown.returncode == 1 and "no running job" in unknown.stderr
    finally:
        await server.stop()


@pytest.mark.parametrize(("profile", "masks", "unsupported"), [("2.31", [0x46, 0], 0), ("2.30", [], 1)])
async def test_profiling_on_demand_turns_a_job_on_then_off(
    settings: Settings, tmp_path: Path, profile: str, masks: list[int], unsupported: int
) -> None:
    """An alert with a job fires (here ``job_started``, configured as the trigger): the aggregator asks the polling
    agent to turn profiling on, and off ``on_s`` later; a job whose NCCL predates CONTROL is not asked."""
    spec = JobSpec(nodes=2, gpus_per_node=2, pp=2)
    phases = comms(spec)
    job: Any = types.SimpleNamespace(
        spec=spec, phases=phases, counts={c.comm_id: 1 for p in phases for c in p}
    )
    version = PROFILES[profile].version
    server = FakeRasServer(PROFILES[profile], TEXT.replace(b"2.30.7", version.encode()),
                           ras_status_json(job, set(), version=version))  # fmt: skip
    await server.start()
    proc = fake_proc(tmp_path / "proc", server.port, {"SLURM_JOB_ID": "5"})
    s = settings.model_copy(deep=True)
    s.agent.node = "node-a"
    s.agent.collectors.ras = s.agent.collectors.ras.model_copy(update={
        "addr": server.address, "interval_s": 0.2, "ttl_s": 5.0, "lease_ttl_s": 1.0, "proc_root": proc,
        "timeout_s": 2.0, "profile_control": True, "diagnostics": False})  # fmt: skip
    s.aggregator.profile_on_demand = s.aggregator.profile_on_demand.model_copy(update={
        "enabled": True, "rules": ["job_started"], "on_s": 1.0})  # fmt: skip
    try:
        async with aggregator(s) as agg, agent(s, only=["ras"]):
            await wait_for(lambda: any(j.job_id == "slurm-5" for j in agg.state.jobs.live()), timeout=15)
            stats = agg.profiling.stats
            await wait_for(lambda: stats.turned_off + stats.unsupported + stats.failed >= 1, timeout=15)
            assert server.profiler_masks == masks and stats.unsupported == unsupported and stats.failed == 0
            assert not agg.profiling.active
    finally:
        await server.stop()
