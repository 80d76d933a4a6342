"""The agent's side of hang dumps (``agent/collectors/app_dumps.py``) against the real client responder thread and
against processes that answer wrongly: every failure is one reason in the answer, and the agent goes on."""

from __future__ import annotations

import asyncio
import json
import os
import pickle
import shutil
import socket
import threading
import time
from pathlib import Path
from typing import Any

import msgpack
import pytest

from ranksight.agent.collectors.app_dumps import DumpChannels, fit_reply, torch_dump_files
from ranksight.client import dumps as client_dumps
from ranksight.core.flightrec import analyze, parse_dump
from ranksight.core.flightrec.bundle import trim_bundle
from ranksight.settings import Settings

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "flight_recorder"


def app_settings(**values: Any) -> Any:
    settings = Settings()
    settings.agent.collectors.app = settings.agent.collectors.app.model_copy(update=values)
    return settings.agent.collectors.app


async def serve_pair(
    channels: DumpChannels, hello: dict[str, Any]
) -> tuple[socket.socket, asyncio.Task[None]]:
    agent_end, process_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    agent_end.setblocking(False)
    task = asyncio.create_task(channels.serve(agent_end, hello))
    await asyncio.sleep(0)
    return process_end, task


def fake_process(sock: socket.socket, answer: list[bytes]) -> threading.Thread:
    """A process that reads one request and sends ``answer``'s packets (what a broken or hostile client could)."""

    def run() -> None:
        msgpack.unpackb(sock.recv(65536))
        for packet in answer:
            sock.send(packet)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


async def test_real_responder_answers_with_every_thread_stack() -> None:
    channels = DumpChannels(app_settings(dump_timeout_s=10.0))
    agent_end, process_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    agent_end.setblocking(False)
    responder = client_dumps.DumpResponder("unused", {"pid": 4242, "rank": 5, "world_size": 8, "job": "j"})
    hello = msgpack.unpackb(msgpack.packb(responder.hello))

    def respond() -> None:  # the responder's loop body on an already connected socket
        data = process_end.recv(65536)
        request = msgpack.unpackb(data)
        payload = msgpack.packb(client_dumps.build_dump(request["max_bytes"]), use_bin_type=True)
        for packet in client_dumps.parts(request["id"], payload):
            process_end.send(packet)

    task = asyncio.create_task(channels.serve(agent_end, hello))
    await asyncio.sleep(0)
    thread = threading.Thread(target=respond, daemon=True)
    thread.start()
    (result,) = await channels.dump_job("j", entries_per_group=8)
    assert result["error"] is None and (result["rank"], result["pid"]) == (5, 4242)
    meta = result["dump"]["ranksight"]
    assert meta["rank"] == 5 and meta["world_size"] == 8 and meta["time_ns"] > 0
    main = [t for t in meta["threads"] if t["main"]]
    # the main thread is in the event loop, waiting for this very answer
    assert main and any(f["name"] == "run_until_complete" for f in main[0]["frames"])
    assert await channels.dump_job("other-job", entries_per_group=8) == []
    process_end.close()
    await asyncio.wait_for(task, 5)
    assert channels.channels == {}


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (
            lambda: client_dumps.parts(
                1,
                msgpack.packb(
                    {
                        "time_ns": 1,
                        "threads": [],
                        "flight_recorder": pickle.dumps({"version": "x", "entries": [print]}),
                    }
                ),
            ),
            "refused: the pickle names builtins.print",
        ),
        (lambda: client_dumps.parts(1, b"\x00" * (64 * 1024 + 4 * 1024 * 1024 + 1)), "over the"),
        (
            lambda: client_dumps.parts(
                1,
                msgpack.packb(
                    {
                        "time_ns": 1,
                        "threads": [],
                        "flight_recorder": pickle.dumps(
                            {"version": "x", "entries": [], "junk": [list(range(1000))] * 10_000}
                        ),
                    }
                ),
            ),
            "beyond its own size",
        ),
        (lambda: [b"\xc1garbage"], "no answer within"),
        (lambda: client_dumps.parts(1, msgpack.packb([1, 2, 3])), "not a map"),
        (lambda: [], "no answer within"),
    ],
    ids=["hostile-pickle", "oversized", "shared-references", "garbage", "not-a-map", "silent"],
)
async def test_bad_answers_become_reasons(answer: Any, reason: str) -> None:
    channels = DumpChannels(app_settings(dump_timeout_s=1.0, dump_max_bytes=64 * 1024))
    # the request id of the first request is 1: the fake answers with it
    process_end, task = await serve_pair(channels, {"pid": 7, "rank": 0, "job": "j"})
    fake_process(process_end, answer())
    (result,) = await channels.dump_job("j", entries_per_group=8)
    assert result["dump"] is None and reason in result["error"], result
    assert channels.failures == 1
    process_end.close()
    await asyncio.wait_for(task, 5)


def test_trim_keeps_the_latest_entries_of_each_group() -> None:
    entries = [{"process_group": [g, ""], "record_id": i} for i, g in enumerate("0101010")]
    trimmed = trim_bundle({"entries": entries}, 2)
    # in enqueue order, the last two of each group
    assert [(e["process_group"][0], e["record_id"]) for e in trimmed["entries"]] == [("1", 3), ("0", 4), ("1", 5),
                                                                                     ("0", 6)]  # fmt: skip
    assert trimmed["entries_dropped"] == 3


def test_fit_reply_cuts_stacks_then_entries_then_dumps() -> None:
    def proc(n_entries: int) -> dict[str, Any]:
        return {
            "pid": n_entries,
            "error": None,
            "dump": {
                "entries": [{"record_id": i, "pad": "x" * 100} for i in range(n_entries)],
                "ranksight": {
                    "threads": [{"main": True, "frames": []}, {"main": False, "frames": ["y" * 5000]}]
                },
            },
        }

    fitted = fit_reply([proc(64), proc(64)], 10_000)
    assert all(len(p["dump"]["ranksight"]["threads"]) == 1 for p in fitted)
    assert all(len(p["dump"]["entries"]) < 64 and p["dump"]["entries_dropped"] > 0 for p in fitted)
    tiny = fit_reply([proc(4), proc(4)], 300)
    assert [p["dump"] for p in tiny] == [None, None] and "must fit 300 bytes" in tiny[0]["error"]


def test_torch_timeout_files_are_read_checked_and_bounded(tmp_path: Path) -> None:
    """The files torch writes on a watchdog timeout (here: real torch pickles from a gloo job that hung)."""
    for path in (FIXTURES / "stopped").iterdir():
        shutil.copy(path, tmp_path / f"nccl_trace_rank_{path.name.rsplit('_', 1)[1]}")
    (tmp_path / "nccl_trace_rank_7").write_bytes(pickle.dumps({"version": "2.10", "entries": [print]}))
    (tmp_path / "nccl_trace_rank_8").write_bytes(b"\x80" + b"\x00" * 70_000)
    old = tmp_path / "nccl_trace_rank_9"
    shutil.copy(FIXTURES / "stopped" / "trace_rank_0", old)
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    (tmp_path / "nccl_trace_rank_5").symlink_to("/etc/passwd")
    found = torch_dump_files(
        tmp_path, max_bytes=64 * 1024, max_age_s=600, max_files=100, entries_per_group=64
    )
    by_rank = {e["rank"]: e for e in found if e["dump"] is not None}
    assert sorted(by_rank) == [0, 1, 2]  # not the old one, not the link
    errors = {e["source"].rsplit(" ", 1)[-1]: e["error"] for e in found if e["dump"] is None}
    assert sorted(errors) == ["nccl_trace_rank_7", "nccl_trace_rank_8"]
    assert "refused: the pickle names builtins.print" in errors["nccl_trace_rank_7"]
    assert "over the" in errors["nccl_trace_rank_8"]
    dumps = [parse_dump(json.dumps(e["dump"]).encode(), e["source"]) for e in by_rank.values()]
    (finding,) = analyze(dumps).findings
    assert (finding.kind, finding.missing_ranks, finding.seq) == ("collective_hang", [2], 4)
    assert finding.waiting_s is not None  # the file's time is the dump time
    assert len(torch_dump_files(tmp_path, 64 * 1024, 600, 2, 64)) == 2


async def test_channels_are_keyed_by_the_kernels_pid_and_bounded() -> None:
    channels = DumpChannels(app_settings(dump_max_processes=1))
    first, task = await serve_pair(channels, {"pid": 1, "rank": 0, "job": "j"})  # claims pid 1
    assert list(channels.channels) == [os.getpid()]  # what SO_PEERCRED says, not the claim
    channels.channels[999_999] = channels.channels[
        os.getpid()
    ]  # another process's connection fills the bound
    del channels.channels[os.getpid()]
    refused, refused_task = await serve_pair(channels, {"pid": 2, "rank": 1, "job": "j"})
    await asyncio.wait_for(refused_task, 5)  # over dump_max_processes: not kept
    assert channels.refused == 1 and list(channels.channels) == [999_999]
    first.close()
    refused.close()
    task.cancel()
