"""Torch's own dump sources, for jobs that do not use ``ranksight.client``: the worker server (``fr_trace_json`` over
its Unix socket) with a real PyTorch gloo job, and the NCCL-only debug-info pipe against a reader that does what
torch's ``DumpPipe`` does (gloo makes no pipe; checked below)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from ranksight.agent.collectors.app import AppCollector
from ranksight.agent.collectors.torch_sources import parse_http_head, trigger_debug_pipes, worker_server_dumps
from ranksight.core.flightrec import DumpError, analyze, parse_dump
from ranksight.core.flightrec.bundle import bundle_from_reply
from tests.fr_job import start_ranks
from tests.integration.test_hang_forensics import free_port
from tests.support import wait_for
from tests.unit.test_hang_dump_agent import app_settings

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "flight_recorder"


@pytest.fixture
def stopped_job(tmp_path: Path) -> Iterator[tuple[Path, list[subprocess.Popen[bytes]]]]:
    """A real gloo job whose rank 2 stops entering collectives; every rank serves torch's worker server."""
    sockets, mark = tmp_path / "sockets", tmp_path / "hang-start"
    sockets.mkdir()
    argv = [
        "--scenario",
        "stopped",
        "--port",
        str(free_port()),
        "--worker-sockets",
        str(sockets),
        "--mark",
        str(mark),
    ]
    procs = start_ranks(argv, 3, "J9")
    yield sockets, procs
    for proc in procs:
        proc.kill()
        proc.wait(timeout=10)


def dumps_of(found: list[dict[str, object]]) -> list[object]:
    return [
        parse_dump(json.dumps(e["dump"]).encode(), str(e["source"])) for e in found if e["dump"] is not None
    ]


async def test_worker_server_of_a_real_gloo_job_names_the_stopped_rank(stopped_job) -> None:  # type: ignore[no-untyped-def]
    sockets, procs = stopped_job
    mark = sockets.parent / "hang-start"
    await wait_for(mark.exists, timeout=120)
    await asyncio.sleep(1.0)  # ranks 0 and 1 are in all_reduce seq 4 by now
    found = await worker_server_dumps(str(sockets / "worker*.sock"), "J9", max_bytes=1 << 20, timeout_s=10,
                                      concurrency=2, max_files=10, entries_per_group=64)  # fmt: skip
    assert [e["error"] for e in found] == [None, None, None]
    # the server's pid (SO_PEERCRED) is the rank's own process, its job read from that process's environment
    assert sorted(e["pid"] for e in found) == sorted(p.pid for p in procs)
    assert {e["job"] for e in found} == {"J9"}
    (finding,) = analyze(dumps_of(found)).findings  # type: ignore[arg-type]
    assert (finding.kind, finding.missing_ranks, finding.seq) == ("collective_hang", [2], 4)
    assert finding.process_group == "0:default_pg" and finding.waiting_s is not None  # the answer's time
    # another job's servers are not asked
    assert await worker_server_dumps(str(sockets / "worker*.sock"), "J10", 1 << 20, 10, 2, 10, 64) == []
    # an answer over the limit is refused with the reason
    (small, *_) = await worker_server_dumps(str(sockets / "worker0.sock"), None, 100, 10, 1, 10, 64)
    assert small["dump"] is None and "over the 100-byte limit" in small["error"]


def test_gloo_makes_no_debug_pipe(tmp_path: Path) -> None:
    """``TORCH_NCCL_DEBUG_INFO_PIPE_FILE`` is ProcessGroupNCCL's: a gloo process group creates no FIFO."""
    script = (
        "import torch.distributed as dist\n"
        f"dist.init_process_group('gloo', init_method='tcp://127.0.0.1:{free_port()}', rank=0, world_size=1)\n"
        "import torch; t = torch.ones(2); dist.all_reduce(t); dist.destroy_process_group()\n"
    )
    env = {
        **os.environ,
        "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": str(tmp_path / "pipe_"),
        "TORCH_FR_BUFFER_SIZE": "16",
    }
    subprocess.run([sys.executable, "-c", script], env=env, check=True, timeout=120, capture_output=True)
    assert list(tmp_path.iterdir()) == []


def torch_dump_pipe(
    prefix: str, rank: int, dump_file: Path, stop: threading.Event, reading: threading.Semaphore
) -> None:
    """What ProcessGroupNCCL's DumpPipe and heartbeat monitor do: a FIFO ``<prefix><rank>.pipe`` (0666) opened
    read-only, non-blocking, polled; on a byte, the Flight Recorder pickle goes to ``<temp file><rank>``."""
    name = f"{prefix}{rank}.pipe"
    os.mkfifo(name, 0o666)
    fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK)
    reading.release()  # the pipe has a reader from here on
    try:
        while not stop.is_set():
            try:
                got = os.read(fd, 128)
            except BlockingIOError:
                got = b""
            if got:  # whole or not at all: the test removes the files between two requests
                partial = dump_file.parent.parent / f"{dump_file.name}.partial"
                shutil.copy(FIXTURES / "stopped" / f"trace_rank_{rank}", partial)
                partial.replace(dump_file)
            time.sleep(0.05)
    finally:
        os.close(fd)


async def test_debug_pipe_asks_torch_to_write_its_dump(tmp_path: Path) -> None:
    prefix, dumps = str(tmp_path / "pipe_"), tmp_path / "dumps"
    dumps.mkdir()
    stop, reading = threading.Event(), threading.Semaphore(0)
    readers = [threading.Thread(target=torch_dump_pipe,
                                args=(prefix, r, dumps / f"nccl_trace_rank_{r}", stop, reading))
               for r in range(3)]  # fmt: skip
    for reader in readers:
        reader.start()
    try:
        for _ in readers:
            assert reading.acquire(timeout=30)
        os.mkfifo(f"{prefix}7.pipe")  # a process that is gone: nobody reads its pipe
        (tmp_path / "pipe_8.pipe").write_text("not a fifo")
        asked, unasked = trigger_debug_pipes(prefix, max_files=100)
        assert asked == 3
        assert sorted((e["rank"], e["error"]) for e in unasked) == [(7, "no process reads it (gone)"),
                                                                    (8, "not a named pipe")]  # fmt: skip
        wait_for_sync(lambda: len(list(dumps.iterdir())) == 3)
        # the agent's way: the pipes, a wait, then the files (with the reasons of the pipes it could not ask)
        for dump in dumps.iterdir():
            dump.unlink()
        settings = app_settings(
            torch_debug_pipe_prefix=prefix, torch_dump_dir=dumps, torch_pipe_wait_s=3.0
        )  # time for the readers on a loaded machine
        found = await AppCollector._torch_dumps(SimpleNamespace(app_settings=settings), None, 64)  # type: ignore[arg-type]
    finally:
        stop.set()
        for reader in readers:
            reader.join()
    assert sorted(str(e["error"]) for e in found if e["dump"] is None) == ["no process reads it (gone)",
                                                                          "not a named pipe"]  # fmt: skip
    (finding,) = analyze(dumps_of(found)).findings  # type: ignore[arg-type]
    assert (finding.kind, finding.missing_ranks, finding.seq) == ("collective_hang", [2], 4)


def wait_for_sync(predicate, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.mark.parametrize(
    ("head", "message"),
    [(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n", "answered 'HTTP/1.1 404 Not Found'"),
     (b"SSH-2.0-OpenSSH\r\n\r\n", "not an HTTP answer"),
     (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", "no Content-Length"),
     (b"HTTP/1.1 200 OK\r\nContent-Length: 99999999\r\n\r\n", "over the 1000-byte limit")],
)  # fmt: skip
def test_bad_worker_server_answers_get_a_reason(head: bytes, message: str) -> None:
    with pytest.raises(DumpError, match=message):
        parse_http_head(head, 1000)


P2P_JOB = """
import os, sys, threading, time
import torch, torch.distributed as dist
rank, port, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
def dump():
    time.sleep(3)
    open(f"{out}/fr-{rank}.json", "wb").write(torch._C._distributed_c10d._dump_fr_trace_json(includeCollectives=True))
    os._exit(0)
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
t = torch.ones(4)
dist.all_reduce(t)
threading.Thread(target=dump, daemon=True).start()
if rank == 0:
    dist.send(t, 1)  # rank 1 never posts the recv
time.sleep(60)
"""


def test_gloo_flight_recorder_does_not_see_a_send_that_waits(tmp_path: Path) -> None:
    """Checked on torch 2.13's CPU build: gloo's Flight Recorder records no send or recv, and a send waiting for a
    recv that never comes leaves its group's sequence ids where they were: such a hang is invisible in it (the
    rank's thread stacks show it). P2P matching is for NCCL's dumps, whose sends and recvs are entries."""
    env = {**os.environ, "TORCH_FR_BUFFER_SIZE": "16"}
    port = str(free_port())
    procs = [subprocess.Popen([sys.executable, "-c", P2P_JOB, str(r), port, str(tmp_path)], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for r in range(2)]  # fmt: skip
    try:
        for proc in procs:
            proc.wait(timeout=120)
    finally:
        for proc in procs:
            proc.kill()
    dumps = [parse_dump(p.read_bytes(), p.name) for p in sorted(tmp_path.glob("fr-*.json"))]
    assert [d.rank for d in dumps] == [0, 1]
    assert not any(e.is_p2p for d in dumps for e in d.entries)
    assert [(d.pg_status[0].last_enqueued, d.pg_status[0].last_completed) for d in dumps] == [(1, 1), (1, 1)]
    assert analyze(dumps).findings == []  # type: ignore[arg-type]


CLIENT_JOB = """
import sys, torch, torch.distributed as dist
from ranksight.client.dumps import build_dump
port, out = sys.argv[1], sys.argv[2]
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
dist.all_reduce(torch.ones(4))
open(f"{out}/plain", "wb").write(build_dump(1 << 26)["flight_recorder"])
open(f"{out}/frames", "wb").write(build_dump(1 << 26, collective_frames=True)["flight_recorder"])
"""


def test_client_sends_torch_json_and_its_pickle_only_for_call_sites(tmp_path: Path) -> None:
    """A real gloo process: ``ranksight.client`` hands the agent torch's JSON, which needs no unpickling; torch's
    pickle only when the collectives' call sites are asked for (only it carries them). The agent reads both."""
    proc = subprocess.run([sys.executable, "-c", CLIENT_JOB, str(free_port()), str(tmp_path)],
                          env={**os.environ, "TORCH_FR_BUFFER_SIZE": "16"}, capture_output=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    plain, frames = (tmp_path / "plain").read_bytes(), (tmp_path / "frames").read_bytes()
    assert plain.startswith(b"{") and frames.startswith(b"\x80")
    identity = {"rank": 0, "world_size": 1, "pid": 1, "host": "h", "job": "j"}
    (_, from_json), (_, from_pickle) = (
        bundle_from_reply(identity, {"flight_recorder": data, "time_ns": 1}, name)
        for name, data in (("plain", plain), ("frames", frames))
    )
    assert [e.collective for e in from_json.entries] == ["gloo:all_reduce"]
    assert not from_json.entries[0].frames and from_pickle.entries[0].frames
    assert [replace(e, frames=()) for e in from_pickle.entries] == list(from_json.entries)
