"""Hang evidence on request: answers the agent's dump requests from a thread of its own.

The training code does nothing: the first ``ranksight.client`` call (``start``, ``heartbeat``, ...) starts one daemon
thread, ``ranksight-dump``, that opens a second connection to the agent's socket, says ``listen`` and then sleeps in
``recv`` until the agent asks. It needs nothing from the thread that may be stuck: it reads every thread's Python stack
(``sys._current_frames``) and, when the job has imported torch, torch's Flight Recorder
(``torch._C._distributed_c10d._dump_fr_trace_json()``, or ``_dump_fr_trace()``'s pickle when the collectives' call sites
are asked for: torch's own bytes, passed on as they are; the agent parses the JSON and reads a pickle with a loader that
admits plain data only). It never imports torch itself and never raises into the job.

Wire (same framing as :mod:`ranksight.client`: one msgpack map per seqpacket packet, ``v`` = 1):

=================  ==================================================================================================
direction          packet
=================  ==================================================================================================
client -> agent    ``{"t": "listen", pid, rank, local_rank, world_size, job, "host"}`` once per connection
agent -> client    ``{"t": "dump_request", "id": int, "max_bytes": int, "collective_frames": bool}``
client -> agent    ``{"t": "dump_part", "id", "i", "n", "data": bytes}`` for i in 0..n-1: the parts of one msgpack map
                   ``{"time_ns", "threads": [{"id", "name", "main", "frames": [{filename, line, name}]}],
                   "flight_recorder": bytes | None, "gpu": {"index", "visible_devices"} | None,
                   "error": str | None}``
=================  ==================================================================================================

Cost to the job: one idle thread and one socket; per request, the GIL for as long as the stacks take to walk and torch
takes to serialize its ring (milliseconds for a few thousand entries). With ``collective_frames`` torch also symbolizes
the call site of every recorded collective: seconds of CPU the first time in a process.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
import traceback
from typing import Any

import msgpack

MAX_STACK_FRAMES = 64
MAX_PART = 48 * 1024  # data bytes per packet, under the client's MAX_MESSAGE
SEND_TIMEOUT_S = 5.0
RETRY_AFTER_S = 5.0


def thread_stacks(max_frames: int = MAX_STACK_FRAMES) -> list[dict[str, Any]]:
    """Every thread's Python stack, outermost frame first, the innermost ``max_frames`` kept."""
    names = {t.ident: t for t in threading.enumerate()}
    main_id = threading.main_thread().ident
    out = []
    for ident, frame in sys._current_frames().items():
        if ident == threading.get_ident():
            continue  # this thread, answering
        stack = traceback.extract_stack(frame)[-max_frames:]
        thread = names.get(ident)
        out.append({"id": ident, "name": thread.name if thread else str(ident), "main": ident == main_id,
                    "frames": [{"filename": f.filename, "line": f.lineno or 0, "name": f.name} for f in stack]})  # fmt: skip
    return out


def flight_recorder(collective_frames: bool = False) -> bytes | None:
    """torch's Flight Recorder when the job has imported torch.distributed (None otherwise): its JSON, or its pickle
    when the call sites of the recorded collectives are asked for (``collective_frames``; only the pickle carries
    them). They cost seconds of CPU the first time a process asks (torch symbolizes its captured stacks), so they are
    left out unless asked for: the thread stacks say where a rank is."""
    torch = sys.modules.get("torch")
    if torch is None or "torch.distributed" not in sys.modules:
        return None
    c10d = torch._C._distributed_c10d
    dump: bytes = (
        c10d._dump_fr_trace(includeStackTraces=True)
        if collective_frames
        else c10d._dump_fr_trace_json(includeCollectives=True)
    )
    return dump


def gpu() -> dict[str, Any] | None:
    """The GPU the process's torch uses, when it has initialized CUDA (never initializes it)."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return None
    return {
        "index": int(torch.cuda.current_device()),
        "visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }


def build_dump(max_bytes: int, collective_frames: bool = False) -> dict[str, Any]:
    """One process's evidence; the Flight Recorder is left out (and said so) when it alone exceeds ``max_bytes``."""
    dump: dict[str, Any] = {"time_ns": time.time_ns(), "threads": thread_stacks(), "flight_recorder": None,
                            "error": None, "gpu": None}  # fmt: skip
    try:
        dump["gpu"] = gpu()
    except Exception as exc:  # a broken CUDA setup: the rest still answers
        dump["error"] = f"gpu: {type(exc).__name__}: {exc}"[:500]
    try:
        recorded = flight_recorder(collective_frames)
    except Exception as exc:  # an old torch, Flight Recorder off: the stacks still answer
        dump["error"] = f"flight recorder: {type(exc).__name__}: {exc}"[:500]
    else:
        if recorded is not None and len(recorded) > max_bytes:
            dump["error"] = f"flight recorder: {len(recorded)} bytes, over the {max_bytes}-byte limit"
        else:
            dump["flight_recorder"] = recorded
    return dump


def parts(request_id: int, payload: bytes) -> list[bytes]:
    chunks = [payload[i : i + MAX_PART] for i in range(0, len(payload), MAX_PART)] or [b""]
    return [msgpack.packb({"v": 1, "t": "dump_part", "id": request_id, "i": i, "n": len(chunks), "data": chunk},
                          use_bin_type=True) for i, chunk in enumerate(chunks)]  # fmt: skip


class DumpResponder(threading.Thread):
    """The ``ranksight-dump`` thread: connects, says who it is, answers requests; reconnects after an agent restart."""

    def __init__(self, socket_path: str, identity: dict[str, Any]) -> None:
        super().__init__(name="ranksight-dump", daemon=True)
        self.socket_path = socket_path
        self.hello = {"v": 1, "t": "listen", **identity, "host": socket.gethostname()}
        self.answered = 0

    def run(self) -> None:
        while True:
            try:
                self._serve_once()
            except Exception:  # agent absent, restarted or confused: try again later, quietly
                pass
            time.sleep(RETRY_AFTER_S)

    def _serve_once(self) -> None:
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as sock:
            sock.connect(self.socket_path)
            sock.settimeout(SEND_TIMEOUT_S)
            sock.send(msgpack.packb(self.hello, use_bin_type=True))
            while True:
                sock.settimeout(None)  # idle until asked: a thread asleep in recv costs the job nothing
                data = sock.recv(64 * 1024)
                if not data:
                    return
                request = msgpack.unpackb(data, raw=False)
                if not isinstance(request, dict) or request.get("t") != "dump_request":
                    continue
                max_bytes = int(request.get("max_bytes") or 64 * 1024 * 1024)
                dump = build_dump(max_bytes, bool(request.get("collective_frames")))
                payload = msgpack.packb(dump, use_bin_type=True)
                sock.settimeout(SEND_TIMEOUT_S)
                for packet in parts(int(request.get("id", 0)), payload):
                    sock.send(packet)
                self.answered += 1


_responder: DumpResponder | None = None
_lock = threading.Lock()


def ensure_responder(socket_path: str, identity: dict[str, Any]) -> None:
    """Start this process's responder once (again in a forked child, which has its own identity)."""
    global _responder
    if _responder is not None and _responder.is_alive() and _responder.hello.get("pid") == os.getpid():
        _responder.socket_path = (
            socket_path  # client.configure() chose another agent: used from the next connect
        )
        return
    with _lock:
        if _responder is None or not _responder.is_alive() or _responder.hello.get("pid") != os.getpid():
            _responder = DumpResponder(socket_path, identity)
            _responder.start()
