"""The async RAS client against the faithful fake server over real TCP: every version profile, feature caching,
MONITOR, and the typed errors (refused, never answers, reset mid-stream, ERROR/BUSY replies, oversized)."""

from __future__ import annotations

import asyncio
import json
import socket

import pytest

from agent.collectors.ras.client import RasClient, parse_ras_addr
from agent.collectors.ras.errors import RasOversized, RasRefused, RasReplyError, RasReset, RasTimeout
from agent.collectors.ras.fake_server import PROFILES, FakeRasServer
from agent.collectors.ras.parse_json import parse_status_json
from agent.collectors.ras.parse_text import parse_status_text
from schemas.records.ras import RasEvent
from tests.conftest import FIXTURES

TEXT = (FIXTURES / "ras/rccl_2.28.3_text_status_incomplete_1node_missing_rank6.txt").read_bytes()
JSON = (FIXTURES / "ras/nccl_2.29.1_json_status_docs_sample_missing_rank.json").read_bytes()


def fake(profile: str, **kw: object) -> FakeRasServer:
    return FakeRasServer(PROFILES[profile], TEXT, JSON, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(("profile", "fmt", "raw_json_valid"), [
    ("2.24", "text", None), ("2.26", "text", None), ("2.28.7", "json", False), ("2.28.9", "json", False),
    ("2.29", "json", True),
])  # fmt: skip
async def test_status_for_every_profile(profile: str, fmt: str, raw_json_valid: bool | None) -> None:
    async with fake(profile) as server:
        client = RasClient(server.address, timeout_s=5)
        got_fmt, body = await client.status()
        assert got_fmt == fmt
        assert server.commands[:2] == ["CLIENT PROTOCOL 2", "TIMEOUT 5"]
        assert server.commands[-1] == "STATUS"  # nothing is sent after the status
        if fmt == "text":
            assert body == TEXT
            assert parse_status_text(body).communicators[0].missing_ranks == [6]
        else:
            try:
                json.loads(body)
                valid = True
            except json.JSONDecodeError:
                valid = False
            assert valid is raw_json_valid
            assert parse_status_json(body).communicators[0].missing_ranks == [1]


async def test_feature_probe_is_cached_per_endpoint() -> None:
    async with fake("2.24") as server:
        client = RasClient(server.address)
        await client.status()
        assert "SET FORMAT json" in server.commands and client.features.json is False
        server.commands.clear()
        await client.status()
        assert server.commands == ["CLIENT PROTOCOL 2", "TIMEOUT 5", "STATUS"]
        assert await client.probe_monitor() is False


async def test_monitor_events_text_and_json() -> None:
    event = RasEvent(
        time="2025-12-19 13:07:07", event="PEER_DEAD", host="172.16.64.245", pid=1524345, gpus=[1]
    )
    async with fake("2.29") as server:
        client = RasClient(server.address)
        assert await client.probe_monitor() is True
        stream = client.monitor()
        first = asyncio.ensure_future(stream.__anext__())
        await asyncio.sleep(0.2)
        await server.push_event(event)
        got = await asyncio.wait_for(first, 5)
        assert (got.event, got.host, got.pid, got.gpus, got.event_group) == ("PEER_DEAD", "172.16.64.245", 1524345, [1],
                                                                        "LIFECYCLE")  # fmt: skip
        await stream.aclose()


async def test_localhost_tries_every_address() -> None:
    async with fake("2.29", host="127.0.0.1") as server:  # bound on IPv4 only; ::1 is tried and refused first
        fmt, _ = await RasClient(f"localhost:{server.port}").status()
        assert fmt == "json"


async def test_refused() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(RasRefused):
        await RasClient(f"127.0.0.1:{port}").status()


async def test_server_that_never_answers_times_out() -> None:
    async with fake("2.29", fault="silent") as server:
        with pytest.raises(RasTimeout):
            await RasClient(server.address, timeout_s=0.5).status()


async def test_connection_reset_mid_stream() -> None:
    async with fake("2.24", fault="reset", chunks=8) as server:
        with pytest.raises(RasReset):
            await RasClient(server.address).status()


async def test_error_and_busy_replies() -> None:
    async with FakeRasServer(PROFILES["2.24"], b"BUSY: diagnostics already in progress\n") as server:
        with pytest.raises(RasReplyError, match="BUSY"):
            await RasClient(server.address).status()
    async with fake("2.24") as server:
        with pytest.raises(RasReplyError, match="Invalid timeout"):
            await RasClient(server.address, collective_timeout_s=-1).status()


async def test_oversized_reply() -> None:
    async with fake("2.24") as server:
        with pytest.raises(RasOversized):
            await RasClient(server.address, max_reply_bytes=100).status()


@pytest.mark.parametrize(("value", "expected"), [
    ("localhost:28028", ("localhost", 28028)), ("[::1]:29000", ("::1", 29000)), ("10.0.0.1", ("10.0.0.1", 28028)),
    ("::1", ("::1", 28028)), ("[fe80::1]", ("fe80::1", 28028)),
])  # fmt: skip
def test_parse_ras_addr(value: str, expected: tuple[str, int]) -> None:
    assert parse_ras_addr(value) == expected
