"""RAS DIAGNOSTICS (NCCL 2.32) and CONTROL PROFILER_MASK (2.31) against the fake server over real TCP, each release's
answers as the upstream server gives them (``simulate.ras_server``): a run, BUSY for a concurrent one, the JSON-format
refusal, older servers' ``Unknown command``; the hosts behind a finding resolved from a JSON status; the
``ranksight ras diagnostics`` and ``ranksight ras profile`` commands and their exit codes."""

from __future__ import annotations

import asyncio
import json
import types
from typing import Any

import pytest

from ranksight.agent.collectors.ras.client import RasClient
from ranksight.agent.collectors.ras.diagnostics import run_diagnostics
from ranksight.agent.collectors.ras.errors import RasReplyError
from ranksight.agent.collectors.ras.parse_diagnostics import parse_diagnostics
from ranksight.simulate.cluster import ras_status_json
from ranksight.simulate.inspector import JobSpec, comms
from ranksight.simulate.ras_server import PROFILES, FakeRasServer
from tests.conftest import FIXTURES
from tests.ras_diagnostics_replies import INFO, reply
from tests.support import run_cli_async

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


async def test_a_run_and_a_concurrent_one_answered_busy() -> None:
    async with fake("2.32", INCONSISTENT, diagnostics_delay_s=0.5) as server:
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


@pytest.mark.parametrize("profile", ["2.24", "2.28.9", "2.29", "2.30", "2.31"])
async def test_releases_before_2_32_do_not_know_diagnostics(profile: str) -> None:
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
            server, "CONTROL bogus", "control profiler_mask GROUP,coll", "CONTROL PROFILER_MASK"
        )
        assert out == (b"ERROR: Unknown CONTROL subcommand 'bogus'\nOK\n"
                       b"ERROR: Invalid profiler mask value ''\n")  # fmt: skip
        assert server.profiler_masks[-1] == 3


@pytest.mark.parametrize("profile", ["2.24", "2.29", "2.30"])
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
        assert unsupported.returncode == 1 and "NCCL 2.32 or later" in unsupported.stderr
