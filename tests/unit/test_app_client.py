"""ranksight.client against a real Unix seqpacket socket, decoded by the agent's parser (no agent runtime)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ranksight import client as client_mod
from ranksight.agent.collectors.app_parse import Timeouts, parse_message
from ranksight.client import Client
from ranksight.schemas.records import AppRecord

TIMEOUTS = Timeouts(
    heartbeat_s=30.0, initial_s=300.0, section_s=600.0, per_section={"checkpoint_save": 3600.0}
)


def listen(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    sock.bind(str(path))
    sock.listen(8)
    sock.settimeout(2)
    return sock


@pytest.fixture
def receiver(tmp_path: Path) -> Iterator[socket.socket]:
    sock = listen(tmp_path / "app.sock")
    yield sock
    sock.close()


def received(sock: socket.socket, n: int) -> list[AppRecord]:
    """The first ``n`` messages of the first client that connected."""
    conn, _ = sock.accept()
    conn.settimeout(2)
    with conn:
        return [parse_message(conn.recv(65536), TIMEOUTS) for _ in range(n)]


def test_identity_from_launcher_and_scheduler_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                  receiver: socket.socket) -> None:  # fmt: skip
    for name, value in {"RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "16", "SLURM_JOB_ID": "4242"}.items():
        monkeypatch.setenv(name, value)
    c = Client(str(tmp_path / "app.sock"), heartbeat_interval_s=0)
    c.marker("epoch 3 started", epoch=3, lr=0.1, note=None, obj=Path("/x"))
    (rec,) = received(receiver, 1)
    assert (rec.event, rec.rank, rec.local_rank, rec.world_size, rec.job_id) == ("marker", 5, 1, 16, "4242")
    assert rec.text == "epoch 3 started"
    assert rec.fields == {"epoch": 3, "lr": 0.1, "note": None, "obj": "/x"}  # odd types sent as text
    assert abs(rec.client_ts - time.time_ns()) < 5e9


def test_socket_path_from_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(client_mod.SOCKET_ENV, str(tmp_path / "x.sock"))
    assert Client().socket_path == str(tmp_path / "x.sock")
    monkeypatch.delenv(client_mod.SOCKET_ENV)
    assert Client().socket_path == client_mod.DEFAULT_SOCKET


def test_heartbeats_and_sections_in_order(tmp_path: Path, receiver: socket.socket) -> None:
    c = Client(str(tmp_path / "app.sock"), heartbeat_interval_s=0)
    c.start()
    with c.section("checkpoint_save"):
        c.heartbeat(step=1)
    with pytest.raises(RuntimeError), c.section("forward", timeout_s=5):
        raise RuntimeError("boom")
    c.heartbeat(step=3)
    recs = received(receiver, 7)
    assert [r.event for r in recs] == ["start", "section_open", "heartbeat", "section_close", "section_open",
                                       "section_close", "heartbeat"]  # fmt: skip
    assert [r.n for r in recs] == list(range(1, 8))
    start, ckpt_open, beat1, ckpt_close, fwd_open, fwd_close, beat3 = recs
    assert (start.timeout_s, start.initial_timeout_s) == (30.0, 300.0)  # the agent's defaults fill in
    assert (ckpt_open.section, ckpt_open.timeout_s) == ("checkpoint_save", 3600.0)  # per-name timeout
    assert beat1.open_sections == [ckpt_open.section_id]
    assert (ckpt_close.section_id, ckpt_close.ok) == (ckpt_open.section_id, True)
    assert (fwd_open.timeout_s, fwd_close.ok) == (5.0, False)  # the client's own timeout; the block raised
    assert fwd_close.duration_s is not None and fwd_close.duration_s >= 0
    assert beat3.open_sections == [] and beat3.step == 3
    assert beat3.step_time_s is not None and 0 <= beat3.step_time_s < 1  # per step: elapsed / 2 steps


def test_heartbeats_closer_than_the_interval_are_coalesced(tmp_path: Path, receiver: socket.socket) -> None:
    c = Client(str(tmp_path / "app.sock"), heartbeat_interval_s=60)
    for step in range(100):
        c.heartbeat(step=step)
    assert c.stats() == {"sent": 1, "dropped": 0, "coalesced": 99}
    assert received(receiver, 1)[0].step == 0


def test_no_agent_drops_counts_and_never_raises(tmp_path: Path) -> None:
    c = Client(str(tmp_path / "nobody-here.sock"), heartbeat_interval_s=0)
    started = time.perf_counter()
    for step in range(10_000):
        c.heartbeat(step=step)
        with c.section("forward"):
            pass
        c.marker("x")
    elapsed = time.perf_counter() - started
    assert c.stats()["sent"] == 0
    assert c.stats()["dropped"] == 40_000
    assert elapsed < 2.0, f"40k calls with no agent took {elapsed:.2f}s"


def test_agent_appearing_later_is_picked_up_after_the_retry_delay(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setattr(client_mod, "RETRY_AFTER_S", 0.05)
    path = tmp_path / "late.sock"
    c = Client(str(path), heartbeat_interval_s=0)
    c.marker("lost")
    sock = listen(path)
    try:
        c.marker("still in the retry delay")
        time.sleep(0.1)
        c.marker("arrives")
        (rec,) = received(sock, 1)
        assert (rec.text, rec.dropped) == ("arrives", 2)  # the receiver learns how many were lost
    finally:
        sock.close()


def test_full_socket_buffer_drops_instead_of_blocking(tmp_path: Path, receiver: socket.socket) -> None:
    c = Client(str(tmp_path / "app.sock"), heartbeat_interval_s=0)
    started = time.perf_counter()
    for _ in range(20_000):  # nobody reads: the socket buffer fills within a few thousand packets
        c.marker("x" * 200)
    assert time.perf_counter() - started < 5
    assert c.stats()["dropped"] > 0 and c.stats()["sent"] > 0


def test_a_restarted_agent_is_reconnected_without_loss(tmp_path: Path) -> None:
    path = tmp_path / "app.sock"
    c = Client(str(path), heartbeat_interval_s=0)
    first = listen(path)
    c.marker("to the first agent")
    assert [r.text for r in received(first, 1)] == ["to the first agent"]
    first.close()
    path.unlink()
    second = listen(path)
    try:
        c.marker("to the second agent")  # the old connection is broken: reconnect and send in the same call
        assert [r.text for r in received(second, 1)] == ["to the second agent"]
        assert c.stats()["dropped"] == 0
    finally:
        second.close()


def test_end_is_sent_at_normal_exit(tmp_path: Path, receiver: socket.socket) -> None:
    script = (
        "from ranksight import client\n"
        f"client.configure({str(tmp_path / 'app.sock')!r})\n"
        "client.heartbeat(step=1)\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=30)
    assert [r.event for r in received(receiver, 2)] == ["heartbeat", "end"]


def test_client_imports_only_stdlib_and_msgpack() -> None:
    code = (
        "import sys; from ranksight import client; "
        "bad = [m for m in sys.modules if m.split('.')[0] in ('pydantic', 'nats', 'duckdb', 'pyarrow') "
        "or (m.startswith('ranksight.') and m.split('.')[:2] != ['ranksight', 'client'])]; print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=30)
    assert out.stdout.strip() == "[]"
