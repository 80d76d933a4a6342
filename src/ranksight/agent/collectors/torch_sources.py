"""Torch's own ways to have a process dump its Flight Recorder, for jobs that do not use ``ranksight.client``.

Read from torch 2.13's own sources (``torch/distributed/elastic/control_plane.py``, ``torch/distributed/debug``,
c10d's ``control_plane/WorkerServer`` and ``ProcessGroupNCCL.hpp``) and checked on its CPU build:

* **The worker server** (``torch._C._distributed_c10d._WorkerServer(path)``, started by
  ``torch.distributed.elastic.control_plane.worker_main()`` when ``TORCH_WORKER_SERVER_SOCKET`` is set, and per rank by
  ``torch.distributed.debug.start_debug_server``): HTTP on a Unix socket, served by a C++ thread of its own (the
  stuck Python thread and the GIL are not needed). Its handlers take ``POST /handler/<name>`` (``GET`` is 404; ``GET
  /handler/`` lists them); ``fr_trace_json`` answers torch's JSON Flight Recorder dump. The CPU build registers it
  and records gloo collectives in it, so this works on a gloo job (tested with one). The dump names no rank: the
  rank is the trailing number of the socket's name (as torch names dump files), else ``RANK`` in the server
  process's environment (its pid from ``SO_PEERCRED``), which also gives its job (``SLURM_JOB_ID``, ...).
* **The debug-info pipe** (``TORCH_NCCL_DEBUG_INFO_PIPE_FILE``): NCCL only. ``ProcessGroupNCCL``'s heartbeat monitor
  (of the default group, so the name carries the global rank) makes a FIFO ``<prefix><rank>.pipe`` (mode 0666) and
  opens it read-only, non-blocking; when it reads a byte from it (it polls about once a second) it writes its Flight
  Recorder to ``TORCH_NCCL_DEBUG_INFO_TEMP_FILE<rank>`` (torch's pickle), the same file as on a watchdog timeout.
  Gloo makes no pipe (checked: with the variable set, a gloo job creates none), so this could not run here; it is
  written from that source and tested against a reader that does what torch's does. The agent writes one byte into
  each FIFO (opened write-only, non-blocking: a pipe whose process is gone has no reader and fails at once, never
  blocks), waits ``torch_pipe_wait_s`` and reads the files in ``torch_dump_dir`` as usual.

Both are bounded: at most ``dump_concurrency`` servers asked at once, each answer within ``dump_timeout_s`` and
``dump_max_bytes``, and the answers are checked by the same parser as every other dump (JSON only: the worker server
never sends a pickle).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import glob
import json
import os
import socket
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ranksight.agent.collectors.app_dumps import peer_pid
from ranksight.client import JOB_ENV, RANK_ENV, WORLD_SIZE_ENV
from ranksight.core.flightrec.bundle import bundle_from_torch_file, trim_bundle
from ranksight.core.flightrec.load import DumpError, rank_from_name

FR_TRACE_REQUEST = b"POST /handler/fr_trace_json HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
MAX_HEAD = 16 * 1024  # an HTTP status line and headers
MAX_ENVIRON = 1 << 20  # /proc/<pid>/environ read at most


def process_environ(pid: int) -> dict[str, str]:
    """A process's environment (empty when it is gone or not ours to read)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read(MAX_ENVIRON)
    except OSError:
        return {}
    pairs = (item.partition(b"=") for item in raw.split(b"\0") if item)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, _, v in pairs}


def _first(env: dict[str, str], names: tuple[str, ...]) -> str | None:
    return next((env[n] for n in names if env.get(n)), None)


def _int_or_none(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def parse_http_head(head: bytes, max_bytes: int) -> int:
    """The body length of an HTTP response head; :class:`DumpError` for anything but a 200 within ``max_bytes``."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/"):
        raise DumpError(f"not an HTTP answer: {lines[0][:80]!r}")
    if parts[1] != "200":
        raise DumpError(f"the worker server answered {lines[0][:80]!r}")
    headers = {
        k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)
    }
    length = _int_or_none(headers.get("content-length"))
    if length is None or length < 0:
        raise DumpError("the worker server's answer has no Content-Length")
    if length > max_bytes:
        raise DumpError(f"the worker server's answer is {length} bytes, over the {max_bytes}-byte limit")
    return length


@dataclass
class WorkerServer:
    """Who serves a worker server socket: its pid (``SO_PEERCRED``) and what its environment says."""

    pid: int | None
    env: dict[str, str]

    @property
    def job(self) -> str | None:
        return _first(self.env, JOB_ENV)


async def fetch_worker_trace(path: Path, job: str | None, max_bytes: int, timeout_s: float
                             ) -> tuple[bytes, WorkerServer] | None:  # fmt: skip
    """``fr_trace_json`` from the worker server at ``path`` (torch's JSON) and who serves it; None when its process
    belongs to another job than ``job`` (asked nothing then)."""
    try:
        async with asyncio.timeout(timeout_s):
            reader, writer = await asyncio.open_unix_connection(str(path), limit=MAX_HEAD)
            try:
                sock = writer.get_extra_info("socket")
                pid = peer_pid(sock) if sock is not None else None
                server = WorkerServer(pid, await asyncio.to_thread(process_environ, pid) if pid else {})
                if job is not None and server.job is not None and server.job != job:
                    return None
                writer.write(FR_TRACE_REQUEST)
                await writer.drain()
                head = await reader.readuntil(b"\r\n\r\n")
                body = await reader.readexactly(parse_http_head(head, max_bytes))
            finally:
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()
    except TimeoutError:
        raise DumpError(f"no answer within {timeout_s:g} s") from None
    except DumpError:
        raise
    except (asyncio.LimitOverrunError, asyncio.IncompleteReadError, ValueError) as exc:
        raise DumpError(f"a broken HTTP answer: {type(exc).__name__}") from None
    return body, server


def worker_sockets(pattern: str, max_files: int) -> list[Path]:
    """The Unix sockets matching ``pattern`` (no links, no other files), at most ``max_files``."""
    paths = []
    for name in sorted(glob.glob(pattern)):
        with contextlib.suppress(OSError):
            if stat.S_ISSOCK(os.lstat(name).st_mode):
                paths.append(Path(name))
    return paths[:max_files]


async def worker_server_dumps(pattern: str, job: str | None, max_bytes: int, timeout_s: float, concurrency: int,
                              max_files: int, entries_per_group: int) -> list[dict[str, Any]]:  # fmt: skip
    """Every worker server whose socket matches ``pattern`` (of ``job`` where its environment names one), asked at
    most ``concurrency`` at a time: one entry per server, with its dump or why there is none."""
    paths = await asyncio.to_thread(worker_sockets, pattern, max_files)
    slots = asyncio.Semaphore(concurrency)
    host = socket.gethostname()

    async def one(path: Path) -> dict[str, Any] | None:
        entry: dict[str, Any] = {"source": f"torch worker server {path}", "rank": None, "pid": None, "job": None,
                                 "dump": None, "error": None}  # fmt: skip
        async with slots:
            try:
                fetched = await fetch_worker_trace(path, job, max_bytes, timeout_s)
                if fetched is None:
                    return None  # another job's process
                data, server = fetched
                entry.update(pid=server.pid, job=server.job)
                rank = rank_from_name(path.name)
                rank = rank if rank is not None else _int_or_none(_first(server.env, RANK_ENV))
                bundle, dump = await asyncio.to_thread(
                    bundle_from_torch_file, data, str(path), host, time.time_ns(), rank=rank, pid=server.pid,
                    world_size=_int_or_none(_first(server.env, WORLD_SIZE_ENV)), job=server.job,
                )  # fmt: skip
                entry["rank"], entry["dump"] = dump.rank, trim_bundle(json.loads(bundle), entries_per_group)
            except (DumpError, OSError) as exc:
                entry["error"] = str(exc) or type(exc).__name__
        return entry

    found = await asyncio.gather(*(one(p) for p in paths))
    return [e for e in found if e is not None]


def trigger_debug_pipes(prefix: str, max_files: int) -> tuple[int, list[dict[str, Any]]]:
    """Write one byte into each of torch's debug-info FIFOs ``<prefix><rank>.pipe``: how many were asked, and those
    that could not be, with why (never blocks: a FIFO without a reader, its process gone, fails at once)."""
    asked, out = 0, []
    for name in sorted(glob.glob(glob.escape(prefix) + "*.pipe"))[:max_files]:
        entry: dict[str, Any] = {"source": f"torch debug pipe {name}", "rank": rank_from_name(name[: -len(".pipe")]),
                                 "pid": None, "dump": None, "error": None}  # fmt: skip
        try:
            if not stat.S_ISFIFO(os.lstat(name).st_mode):
                raise DumpError("not a named pipe")
            fd = os.open(name, os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
            try:
                os.write(fd, b"1")
            finally:
                os.close(fd)
        except OSError as exc:
            entry["error"] = (
                "no process reads it (gone)" if exc.errno == errno.ENXIO else exc.strerror or str(exc)
            )
        except DumpError as exc:
            entry["error"] = str(exc)
        if entry["error"] is None:
            asked += 1
        else:
            out.append(entry)
    return asked, out
