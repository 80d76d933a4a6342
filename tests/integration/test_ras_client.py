"""The async RAS client against the faithful fake server over real TCP: every version profile, feature caching,
MONITOR (groups, filtering, upstream's JSON layout), TIMEOUT as upstream parses it, the per-read and overall time
limits, the protocol number, the text+JSON poll, and the typed errors (refused, never answers, reset mid-stream, ERROR
replies, oversized)."""

from __future__ import annotations

import asyncio
import gc
import json
import re
import socket

import pytest

from ranksight.agent.collectors.ras.client import RasClient, parse_ras_addr
from ranksight.agent.collectors.ras.errors import (
    RasOversized,
    RasRefused,
    RasReplyError,
    RasReset,
    RasTimeout,
)
from ranksight.agent.collectors.ras.parse_json import parse_status_json
from ranksight.agent.collectors.ras.parse_monitor import parse_monitor
from ranksight.agent.collectors.ras.parse_text import parse_status_text
from ranksight.agent.collectors.ras.poll import poll_status
from ranksight.schemas.records.ras import RasEvent
from ranksight.simulate.ras_server import PROFILES, FakeRasServer
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
        got_fmt, body = await client.status(prefer_json=True)
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
        await client.status(prefer_json=True)
        assert "SET FORMAT json" in server.commands and client.features.json is False
        server.commands.clear()
        await client.status(prefer_json=True)
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
        fmt, _ = await RasClient(f"localhost:{server.port}").status(prefer_json=True)
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


async def test_error_reply() -> None:
    async with FakeRasServer(PROFILES["2.24"], b"ERROR: something the server refused\n") as server:
        with pytest.raises(RasReplyError, match="refused"):
            await RasClient(server.address).status()


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


UPSTREAM = FIXTURES / "ras/upstream-server"


@pytest.mark.parametrize(("value", "ok"), [("5", True), ("0", True), ("", True), (" 7", True), ("+3", True),
                                           ("  ", False), ("2.5", False), ("1e+06", False), ("-1", False), ("5s", False)])  # fmt: skip
async def test_fake_parses_timeout_as_upstream_strtol(value: str, ok: bool) -> None:
    async with fake("2.29") as server:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(f"TIMEOUT {value}\n".encode())
        reply = (await reader.readline()).decode()
        writer.close()
    assert reply == ("OK\n" if ok else f"ERROR: Invalid timeout value {value}\n")


@pytest.mark.parametrize(("value", "ok"), [("5", True), ("", True), (" 7", True), ("2.5", True), ("1e+06", True),
                                           ("0x1p3", True), (".5", True), ("-0", True), ("  ", False), ("-1", False),
                                           ("5s", False), ("inf", False), ("nan", False), ("1e999", False),
                                           ("1e-400", False), ("2.5 ", False), ("1_0", False)])  # fmt: skip
async def test_fake_2_32_parses_timeout_as_upstream_strtod(value: str, ok: bool) -> None:
    async with fake("2.32") as server:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(f"TIMEOUT {value}\n".encode())
        reply = (await reader.readline()).decode()
        writer.close()
    assert reply == ("OK\n" if ok else f"ERROR: Invalid timeout value {value}\n")


async def test_client_sends_integer_timeout_and_zero_disables_it() -> None:
    async with fake("2.29") as server:
        await RasClient(server.address, collective_timeout_s=0).status()
        await RasClient(server.address, collective_timeout_s=1000000).status()
    assert [c for c in server.commands if c.startswith("TIMEOUT")] == ["TIMEOUT 0", "TIMEOUT 1000000"]


def test_collective_timeout_setting_is_whole_seconds() -> None:
    from pydantic import ValidationError

    from ranksight.agent.collectors.ras.settings import RasSettings

    assert RasSettings(collective_timeout_s=0).collective_timeout_s == 0
    with pytest.raises(ValidationError):
        RasSettings(collective_timeout_s=2.5)  # type: ignore[arg-type]


async def test_status_that_starts_after_ten_seconds_of_gathering_succeeds() -> None:
    """A degraded job's status may sit silent for leg + extra timeout (here 2 x 1 s) before its body: each read waits
    2 x collective + 1 s, as ncclras does, and the overall cap is separate."""
    async with fake("2.24", first_byte_delay_s=2.2) as server:
        _, body = await RasClient(server.address, collective_timeout_s=1, timeout_s=10).status()
        assert body == TEXT
    async with fake("2.24", first_byte_delay_s=3.5) as server:  # past 2 x 1 + 1 s of silence: stalled
        with pytest.raises(RasTimeout, match="stalled"):
            await RasClient(server.address, collective_timeout_s=1, timeout_s=10).status()
    async with fake(
        "2.24", first_byte_delay_s=2.2
    ) as server:  # within the per-read limit, past the overall cap
        with pytest.raises(RasTimeout):
            await RasClient(server.address, collective_timeout_s=1, timeout_s=1.5).status()


async def test_server_protocol_number_is_read_and_a_mismatch_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with fake("2.29", protocol=3) as server:
        client = RasClient(server.address)
        await client.status()
        await client.status()
    assert client.server_protocol == 3
    assert [r.getMessage() for r in caplog.records].count(
        f"RAS endpoint {client.endpoint} speaks protocol 3, this client 2: replies may not parse"
    ) == 1


async def _monitor_lines(
    server: FakeRasServer, command: bytes, events: list[RasEvent], json_format: bool
) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    if json_format:
        writer.write(b"SET FORMAT json\n")
        assert await reader.readline() == b"OK\n"
    writer.write(command)
    reply = await reader.readline()
    if reply != b"OK\n":
        writer.close()
        return reply
    await asyncio.sleep(0.05)
    for event in events:
        await server.push_event(event)
    await asyncio.sleep(0.1)
    await server.stop()
    data = await reader.read()
    writer.close()
    return data


def _session(name: str) -> tuple[bytes, list[RasEvent]]:
    """One captured ncclras session's stdout (``$`` marks line ends) and its events."""
    text = (UPSTREAM / "monitor_events_by_version_and_group.txt").read_text()
    body = (
        text.split(f"== server v2.30.7-1, ncclras v2.30.7-1 {name}:")[1]
        .split("-- stdout:\n")[1]
        .split("\n==")[0]
    )
    raw = (body + "\n").replace("$\n", "\n").encode()
    return raw, parse_monitor(raw)


@pytest.mark.parametrize(("groups", "session"), [
    ("", "-m"), ("lifecycle", "--monitor=lifecycle"), ("trace", "--monitor=trace"), ("all", "--monitor=all"),
    ("TRACE,lifecycle", "--monitor=all"),
])  # fmt: skip
async def test_fake_monitor_filters_by_group_byte_exact(groups: str, session: str) -> None:
    expected, _ = _session(session)
    _, every = _session("--monitor=all")
    async with fake("2.29") as server:
        got = await _monitor_lines(
            server, f"MONITOR {groups}\n".encode() if groups else b"MONITOR\n", every, False
        )
    assert _untimed(got) == _untimed(expected)


async def test_fake_monitor_json_layout_is_upstreams() -> None:
    expected, events = _session("-m -f json")
    async with fake("2.29") as server:
        got = await _monitor_lines(server, b"MONITOR\n", events, True)
    assert _untimed(got) == _untimed(expected)


async def test_fake_rejects_unknown_monitor_group() -> None:
    async with fake("2.29") as server:
        got = await _monitor_lines(server, b"MONITOR bogus\n", [], False)
    assert got == b"ERROR: Invalid event group 'bogus'\n"  # what ncclras prints after "activation failed: "
    async with fake("2.29") as server:
        with pytest.raises(RasReplyError, match="Invalid event group 'bogus'"):
            async for _ in RasClient(server.address).monitor("lifecycle,bogus"):
                pass


def _untimed(data: bytes) -> bytes:
    return re.sub(rb"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", b"T", data)


async def test_monitor_keeps_unknown_peer_address_and_nvml() -> None:
    _, events = _session("--monitor=all")
    async with fake("2.29") as server:
        client = RasClient(server.address)
        stream = client.monitor("all")
        first = asyncio.ensure_future(stream.__anext__())
        await asyncio.sleep(0.2)
        for event in events:
            await server.push_event(event)
        got = [await asyncio.wait_for(first, 5)] + [
            await asyncio.wait_for(stream.__anext__(), 5) for _ in events[1:]
        ]
        await stream.aclose()
    assert [(e.event, e.host, e.pid, e.gpus, e.nvml_gpus, e.addr) for e in got] == [
        ("PEER_NEW", "10.0.0.4", 4001, [0, 1], [4, 5], None), ("PEER_DEAD", "10.0.0.3", 3002, [1], [1], None),
        ("PEER_DEAD", None, None, [], [], "10.9.9.9<1234>"), ("PEER_UNRESPONSIVE", "10.0.0.2", 2001, [0], [2], None),
        ("PEER_RETRY", None, None, [], [], "10.9.9.9<1234>"),
    ]  # fmt: skip
    assert got[-1].details == "connection attempt timed out after 5s, attempting reconnect"


@pytest.mark.parametrize("version", ["2.28.9", "2.29.2", "2.30.7"])
async def test_poll_merges_text_truth_with_json_detail(version: str) -> None:
    text = (UPSTREAM / f"ref_{version}_text_full.txt").read_bytes()
    body = (UPSTREAM / f"ref_{version}_json_full.txt").read_bytes()
    async with FakeRasServer(PROFILES["2.29"], text, body) as server:
        client = RasClient(server.address)
        status = await poll_status(client)
        assert [c for c in server.commands if "STATUS" in c] == ["STATUS", "STATUS"]
        light = await poll_status(client, detail=False)
    assert status.health == light.health == "failed"
    assert [(p.host, p.pid, p.comms) for p in status.missing_processes] == [
        ("10.0.0.3", 3001, {"0x1111aaaa2222bbbb": [4]})
    ]
    assert [(p.host, p.pid, p.comms) for p in status.dead_processes] == [
        ("10.0.0.3", 3002, {"0x1111aaaa2222bbbb": [5]})
    ]
    comms = {c.hash: c for c in status.communicators}
    assert comms["0x1111aaaa2222bbbb"].op_counts["AllReduce"] == 100  # from JSON
    assert (
        "  Rank 4 -- GPU 0 managed by process 3001 on node 10.0.0.3" in comms["0x1111aaaa2222bbbb"].evidence
    )
    assert len(status.communicators) == 5  # JSON adds the communicators the text does not list
    assert "0x429c000200000005" not in comms  # the 2.28.9 phantom


async def test_poll_of_json_only_job_state_still_sees_missing_and_dead() -> None:
    """JSON has no job-level sections: a job whose dead process left no communicator data looks ok in JSON alone."""
    text = (UPSTREAM / "ref_2.30.7_text_nocomms.txt").read_bytes()
    body = (UPSTREAM / "ref_2.30.7_json_nocomms.txt").read_bytes()
    assert parse_status_json(body).health == "ok" and parse_status_json(body).job_sections is False
    async with FakeRasServer(PROFILES["2.29"], text, body) as server:
        status = await poll_status(RasClient(server.address))
    assert status.health == "failed" and status.job_sections
    assert [(p.host, p.pid) for p in status.missing_processes] == [("10.0.0.3", 3001)]
    assert [(p.host, p.pid, p.evidence) for p in status.dead_processes] == [("10.0.0.3", 3002, [
        "DEAD", "  1 job process is considered dead (unreachable via the RAS network)",
        "  Process 3002 on node 10.0.0.3 managing GPU 1"])]  # fmt: skip


async def test_an_expired_cap_raises_without_leaving_a_coroutine_unawaited(
    recwarn: pytest.WarningsRecorder,
) -> None:
    async with fake("2.24") as server:
        with pytest.raises(RasTimeout, match="exceeded its 1e-09s cap"):
            await RasClient(server.address, timeout_s=1e-9).status()
    gc.collect()
    assert not [w for w in recwarn if "never awaited" in str(w.message)]
