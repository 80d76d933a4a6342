"""Chaos: what one hostile peer can make others hold or do is bounded by settings. A record with 100,000 ``links`` is
dead-lettered (``aggregator.ingest.max_sub_records``); a process posting markers in a loop keeps its allowance
(``agent.collectors.app.max_markers_per_minute``, counted by the pid the kernel vouches for); a node announcing a
third party's address as its probe endpoint gets no agent to probe it, and an agent's probes of one address stay within
``max_bytes_per_peer_per_minute``."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import msgpack
import pytest

from ranksight.agent.collectors.app import MarkerLimit, peer_pid
from ranksight.agent.probe.server import parse_networks
from ranksight.agent.probe.targets import ProbeTargets, TargetRefused
from ranksight.aggregator.ingest.pipeline import Incoming
from ranksight.aggregator.ingest.settings import IngestSettings
from ranksight.aggregator.store import Store
from ranksight.schemas.records.probe import ProbeCommand
from ranksight.schemas.subjects import Subjects
from ranksight.schemas.wire import event_type
from ranksight.settings import Settings

pytestmark = pytest.mark.chaos


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(tmp_path / "db.duckdb", Subjects(), IngestSettings())
    s.open()
    try:
        yield s
    finally:
        s.close_connection()
        s.shutdown()


def test_a_record_with_too_many_sub_records_is_dead_lettered(store: Store) -> None:
    limit = IngestSettings().max_sub_records
    links = [{"name": f"xgmi{i}", "up": True} for i in range(100_000)]
    records = [{"index": 0, "links": links}, {"index": 1, "links": links[:limit]}]
    now = time.time_ns()
    messages = [
        Incoming(Subjects().event("c", "n1", "gpu"), msgpack.packb(
            {"type": event_type("gpu"), "cluster": "c", "node": "n1", "agent": "a", "seq": seq, "ts": now,
             "ttl": 30.0, "records": [record]}), now)
        for seq, record in enumerate(records, 1)
    ]  # fmt: skip
    result = store.commit_batch(messages)
    assert result.dead_letters == 1 and [env.seq for env, _ in result.accepted] == [2]  # at the bound: taken
    ((reason, detail),) = store.con.execute("SELECT reason, detail FROM dead_letters").fetchall()
    assert reason == "too_many_sub_records" and "100000" in detail and "max_sub_records" in detail


def test_markers_are_limited_per_process_by_its_kernel_pid() -> None:
    per_minute = Settings().agent.collectors.app.max_markers_per_minute
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with a, b:
        assert peer_pid(a) == os.getpid()  # what the kernel says, whatever the packets claim
    limit = MarkerLimit(per_minute)
    taken = sum(limit.allow(pid=4242, now=0.0) for _ in range(20_000))
    assert taken == per_minute and limit.dropped == 20_000 - per_minute
    assert limit.allow(pid=4343, now=1.0)  # another process has its own allowance
    assert limit.allow(pid=4242, now=60.0)  # the next minute


def _targets() -> ProbeTargets:
    probe = Settings().agent.collectors.probe
    return ProbeTargets(probe.max_bytes, probe.max_seconds, probe.max_peers, parse_networks(probe.allow),
                        probe.max_bytes_per_peer_per_minute)  # fmt: skip


def test_a_probe_endpoint_outside_the_probe_networks_is_never_a_target() -> None:
    targets = _targets()
    targets.observe("rogue", ["93.184.216.34", "victim.example.com", "10.1.2.3"], 443, 60.0, now=0.0)
    for addr in ("93.184.216.34", "victim.example.com"):
        with pytest.raises(TargetRefused, match="is not the probe endpoint"):
            targets.check(ProbeCommand(peer="rogue", addr=addr, port=443), now=1.0)
    targets.check(ProbeCommand(peer="rogue", addr="10.1.2.3", port=443, bytes=1024), now=1.0)
    targets.observe("outside", ["8.8.8.8"], 53, 60.0, now=2.0)
    with pytest.raises(TargetRefused, match="no registered probe endpoint"):
        targets.check(ProbeCommand(peer="outside", addr="8.8.8.8", port=53, mode="light"), now=3.0)


def test_probe_bytes_to_one_address_are_bounded_per_minute() -> None:
    targets = _targets()
    per_minute = Settings().agent.collectors.probe.max_bytes_per_peer_per_minute
    targets.observe("b", ["10.0.0.2"], 28100, 600.0, now=0.0)
    full = ProbeCommand(peer="b", addr="10.0.0.2", port=28100, bytes=64 * 1024**2)
    runs = 0
    with pytest.raises(TargetRefused, match="probe bytes this minute"):
        for _ in range(1000):
            targets.check(full, now=1.0)
            runs += 1
    assert runs == per_minute // (2 * full.bytes)
    targets.check(
        ProbeCommand(peer="b", addr="10.0.0.2", port=28100, mode="light"), now=2.0
    )  # echoes: no bulk
    targets.check(full, now=61.0)  # a new minute
