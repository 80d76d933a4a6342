"""Probe wire frames and measurement arithmetic (pure)."""

from __future__ import annotations

import struct

import pytest
from msgspec.structs import replace

from ranksight.agent.probe.cli import parse_target
from ranksight.agent.probe.protocol import (
    Op,
    ProbeProtocolError,
    ReceiveMeter,
    Reply,
    Request,
    Status,
    rate_bps,
    rtt_stats_us,
)
from ranksight.agent.probe.server import ByteBudget, ServerLimits, is_allowed, parse_networks
from ranksight.agent.probe.targets import ProbeTargets, TargetRefused
from ranksight.schemas.records.probe import ProbeCommand


def test_request_and_reply_round_trip() -> None:
    req = Request(Op.UPLOAD, 5 * 1024**3, 7, 1500)
    assert Request.decode(req.encode()) == req
    rep = Reply(Status.BUSY, 1, 2, 3)
    assert Reply.decode(rep.encode()) == rep


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "must be 24 bytes"),
        (b"HTTP" + bytes(20), "bad magic"),
        (b"RSPB\x09" + bytes(19), "unknown probe operation 9"),
    ],
)
def test_request_rejects_foreign_bytes(data: bytes, message: str) -> None:
    with pytest.raises(ProbeProtocolError, match=message):
        Request.decode(data)


def test_upload_reply_carries_the_receivers_stall_in_what_was_padding() -> None:
    rep = Reply(Status.OK, 10, 9, 8, stall_permille=625)
    assert Reply.decode(rep.encode()) == rep and len(rep.encode()) == 32  # same frame size as before
    before = b"RSPB\x00" + bytes(3) + struct.pack("!QQQ", 10, 9, 8)  # a server from before: zero padding
    assert Reply.decode(before) == Reply(Status.OK, 10, 9, 8, stall_permille=0)
    with pytest.raises(ProbeProtocolError, match="more than the whole measurement"):
        Reply.decode(b"RSPB\x00\x00" + struct.pack("!H", 1001) + bytes(24))


def test_reply_rejects_unknown_status() -> None:
    with pytest.raises(ProbeProtocolError, match="unknown reply status 7"):
        Reply.decode(b"RSPB\x07" + bytes(27))


def test_rtt_is_median_and_jitter_mean_of_successive_differences() -> None:
    rtt, jitter = rtt_stats_us([100_000, 300_000, 200_000, 1_000_000])
    assert rtt == 250.0  # median of 100, 300, 200, 1000 us
    assert jitter == pytest.approx((200 + 100 + 800) / 3)
    assert rtt_stats_us([]) == (None, None)
    assert rtt_stats_us([5000]) == (5.0, None)


def test_receive_meter_times_from_first_chunk() -> None:
    meter = ReceiveMeter()
    meter.chunk(1000, 10_000)  # clock starts here; these bytes are not timed
    meter.chunk(500_000, 2_010_000)
    meter.chunk(500_000, 4_010_000)
    assert (meter.total, meter.timed, meter.elapsed_ns) == (1_001_000, 1_000_000, 4_000_000)
    assert rate_bps(meter.timed, meter.elapsed_ns) == pytest.approx(2e9)  # 1 MB in 4 ms = 2 Gbit/s
    assert rate_bps(0, 0) is None


def test_allow_list() -> None:
    allow = parse_networks(["10.0.0.0/8", "::1"])
    assert is_allowed("10.1.2.3", allow)
    assert is_allowed("::ffff:10.1.2.3", allow)  # IPv4-mapped from a dual-stack socket
    assert is_allowed("::1", allow)
    assert not is_allowed("192.168.1.1", allow)
    assert not is_allowed("garbage", allow)
    assert is_allowed("192.168.1.1", [])  # no list: anyone (the by-hand server)
    with pytest.raises(ValueError, match=r"not an address or CIDR: '10\.0\.0/33'"):
        parse_networks(["10.0.0/33"])


def test_parse_target() -> None:
    assert parse_target("10.0.0.1:28100") == ("10.0.0.1", 28100)
    assert parse_target("[::1]:9") == ("::1", 9)
    for bad in ("host", "host:", ":80", "h:99999", "h:x"):
        with pytest.raises(ValueError):
            parse_target(bad)


def test_byte_budget_charges_as_bytes_move_per_minute_and_per_peer() -> None:
    now = [0.0]
    budget = ByteBudget(
        ServerLimits(max_bytes_per_minute=300, max_bytes_per_peer_per_minute=200), lambda: now[0]
    )
    assert not budget.exhausted("a")  # asking costs nothing
    assert budget.charge("a", 150) and budget.charge("a", 100)  # the chunk that crosses the line still moves
    assert not budget.charge("a", 1) and budget.exhausted("a")  # a's share is spent, b's is not
    assert budget.charge("b", 60) and not budget.charge("b", 1)  # all peers together: 310 > 300
    now[0] = 60.0  # a new minute
    assert budget.charge("a", 200) and budget.charge("b", 50)


def test_probe_targets_remember_announcements_for_their_ttl_within_a_bound() -> None:
    targets = ProbeTargets(max_bytes=1024, max_seconds=1.0, max_peers=2)
    cmd = ProbeCommand(peer="node-b", addr="10.0.0.2", port=28100, bytes=1024, seconds=1.0)
    targets.observe("node-b", ["10.0.0.2"], 28100, 30.0, now=0.0)
    targets.check(cmd, now=29.0)
    with pytest.raises(TargetRefused, match="no registered probe endpoint"):
        targets.check(cmd, now=31.0)  # the announcement expired
    targets.observe("node-b", ["10.0.0.2"], 28100, float("inf"), now=40.0)  # ignored: no finite TTL
    with pytest.raises(TargetRefused, match="no registered probe endpoint"):
        targets.check(cmd, now=41.0)
    for i, node in enumerate(["node-b", "node-c", "node-d"]):  # at most 2 remembered: the oldest goes
        targets.observe(node, ["10.0.0.2"], 28100, 30.0, now=50.0 + i)
    with pytest.raises(TargetRefused, match="no registered probe endpoint"):
        targets.check(cmd, now=53.0)
    with pytest.raises(TargetRefused, match="bytes"):
        targets.check(replace(cmd, **{"peer": "node-c", "bytes": 1025}), now=53.0)
    targets.check(replace(cmd, **{"peer": "node-c"}), now=53.0)
