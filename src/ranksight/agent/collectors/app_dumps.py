"""Hang dumps from the training processes on this node, through their ``ranksight.client`` dump connections.

A process's client opens a second connection to the app socket and says ``listen`` (:mod:`ranksight.client.dumps`):
:class:`DumpChannels` keeps it, keyed by pid, and on the ``hang_dump`` command asks every process of the job at once
(at most ``dump_concurrency`` at a time), each answer bounded by ``dump_max_bytes`` and ``dump_timeout_s``. The answer,
torch's pickle and every thread's stack, is checked off the event loop (:mod:`ranksight.core.flightrec.bundle`: a
plain-data unpickler, then the dump parser) and cut to the last ``dump_entries_per_group`` entries of each process
group for the reply (the divergence is at the end of the ring). A process that does not answer, answers too much or
answers garbage is reported as such; nothing it sends can stop the agent. Where the node's jobs let torch write its
own dumps on a watchdog timeout (``torch_dump_dir``), the recent ones are read too, checked the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import socket
import stat
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ranksight.agent.collectors.settings import AppSettings
from ranksight.core.flightrec.bundle import bundle_from_reply, bundle_from_torch_file, trim_bundle
from ranksight.core.flightrec.load import DumpError
from ranksight.schemas.codec import DecodeError, pack, unpack

IDENTITY_KEYS = ("pid", "rank", "local_rank", "world_size", "job", "host")
MAX_PACKET = 64 * 1024


@dataclass
class _Pending:
    limit: int
    parts: list[bytes] = field(default_factory=list)
    size: int = 0
    done: asyncio.Future[bytes] = field(default_factory=lambda: asyncio.get_running_loop().create_future())

    def add(self, index: Any, count: Any, data: Any) -> None:
        if self.done.done():
            return
        if not (
            isinstance(index, int) and isinstance(count, int) and isinstance(data, bytes)
        ) or index != len(self.parts):
            self.done.set_exception(DumpError("parts out of order or malformed"))
            return
        self.size += len(data)
        if self.size > self.limit:
            self.done.set_exception(DumpError(f"answer over the {self.limit}-byte limit"))
            return
        self.parts.append(data)
        if len(self.parts) >= count:
            self.done.set_result(b"".join(self.parts))


@dataclass
class DumpChannel:
    conn: socket.socket
    identity: dict[str, Any]
    pending: dict[int, _Pending] = field(default_factory=dict)


class DumpChannels:
    def __init__(self, settings: AppSettings) -> None:
        self.settings = settings
        self.channels: dict[int, DumpChannel] = {}  # by pid
        self._ids = itertools.count(1)
        self._slots = asyncio.Semaphore(settings.dump_concurrency)
        self.requests = 0
        self.failures = 0
        self.refused = 0  # dump connections beyond dump_max_processes

    async def serve(self, conn: socket.socket, hello: dict[str, Any]) -> None:
        """One process's dump connection, from its ``listen`` until it disconnects."""
        identity = {key: hello.get(key) for key in IDENTITY_KEYS}
        if not isinstance(identity["pid"], int):
            return
        # keyed by the kernel's word for the peer, not its own (which may be another PID namespace's): a process
        # cannot displace another's connection by claiming its pid
        pid = peer_pid(conn)
        if pid not in self.channels and len(self.channels) >= self.settings.dump_max_processes:
            self.refused += 1
            return
        channel = DumpChannel(conn, identity)
        self.channels[pid] = channel
        loop = asyncio.get_running_loop()
        try:
            while True:
                data = await loop.sock_recv(conn, MAX_PACKET + 1)
                if not data:
                    return
                try:
                    part = unpack(data)
                except DecodeError:
                    continue
                if isinstance(part, dict) and part.get("t") == "dump_part":
                    pending = channel.pending.get(part.get("id"))  # type: ignore[arg-type]
                    if pending is not None:
                        pending.add(part.get("i"), part.get("n"), part.get("data"))
        except ConnectionError:
            return
        finally:
            if self.channels.get(pid) is channel:
                del self.channels[pid]
            for pending in channel.pending.values():
                if not pending.done.done():
                    pending.done.set_exception(DumpError("the process closed its dump connection"))

    async def dump_job(self, job: str | None, entries_per_group: int) -> list[dict[str, Any]]:
        """Every matching process's dump (trimmed), or why there is none; ``job`` None: every process."""
        chosen = [c for c in list(self.channels.values()) if job is None or c.identity.get("job") == job]
        return list(await asyncio.gather(*(self._dump_one(c, entries_per_group) for c in chosen)))

    async def _dump_one(self, channel: DumpChannel, entries_per_group: int) -> dict[str, Any]:
        result: dict[str, Any] = {**channel.identity, "dump": None, "error": None}
        started = time.monotonic()
        async with self._slots:
            self.requests += 1
            try:
                raw = await self._ask(channel)
                result["dump"] = await asyncio.to_thread(_checked, channel.identity, raw, entries_per_group)
            except (DumpError, DecodeError, OSError, TimeoutError) as exc:
                self.failures += 1
                result["error"] = str(exc) or type(exc).__name__
        result["seconds"] = round(time.monotonic() - started, 3)
        return result

    async def _ask(self, channel: DumpChannel) -> bytes:
        cfg = self.settings
        request_id = next(self._ids)
        # the process's own reply framing adds a little to the dump's bytes: the stacks and msgpack headers
        pending = channel.pending[request_id] = _Pending(limit=cfg.dump_max_bytes + 4 * 1024 * 1024)
        loop = asyncio.get_running_loop()
        try:
            request = {"v": 1, "t": "dump_request", "id": request_id, "max_bytes": cfg.dump_max_bytes,
                       "collective_frames": cfg.dump_collective_frames}  # fmt: skip
            await asyncio.wait_for(loop.sock_sendall(channel.conn, pack(request)), cfg.dump_timeout_s)
            try:
                return await asyncio.wait_for(asyncio.shield(pending.done), cfg.dump_timeout_s)
            except TimeoutError:
                raise TimeoutError(f"no answer within {cfg.dump_timeout_s:g} s") from None
        finally:
            channel.pending.pop(request_id, None)
            if pending.done.done():
                with contextlib.suppress(BaseException):
                    pending.done.exception()  # retrieved: never "exception was never retrieved"


def peer_pid(conn: socket.socket) -> int:
    """The pid of the process at the other end of a Unix socket, in this process's PID namespace (SO_PEERCRED)."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid: int = struct.unpack("3i", creds)[0]
    return pid


def _checked(identity: dict[str, Any], raw: bytes, entries_per_group: int) -> dict[str, Any]:
    """A process's answer as ranksight's dump (checked by the parser), cut for the reply."""
    reply = unpack(raw)
    if not isinstance(reply, dict):
        raise DumpError(f"the answer is a {type(reply).__name__}, not a map")
    source = f"pid {identity.get('pid')}"
    data, _ = bundle_from_reply(identity, reply, source)
    bundle: dict[str, Any] = json.loads(data)
    return trim_bundle(bundle, entries_per_group)


def fit_reply(processes: list[dict[str, Any]], limit: int) -> list[dict[str, Any]]:
    """``processes`` cut to fit ``limit`` bytes of JSON: first other threads' stacks go, then each dump's older entries
    (halving), last whole dumps (the process is then listed with the reason)."""

    def size() -> int:
        return len(json.dumps(processes))

    if size() <= limit:
        return processes
    for proc in processes:
        meta = (proc.get("dump") or {}).get("ranksight") or {}
        meta["threads"] = [t for t in meta.get("threads") or [] if t.get("main")]
    while size() > limit:
        longest = max(
            (p for p in processes if p.get("dump")), key=lambda p: len(p["dump"]["entries"]), default=None
        )
        if longest is None or len(longest["dump"]["entries"]) <= 4:
            break
        entries = longest["dump"]["entries"]
        longest["dump"]["entries_dropped"] = longest["dump"].get("entries_dropped", 0) + len(entries) // 2
        longest["dump"]["entries"] = entries[len(entries) // 2 :]
    for proc in sorted(processes, key=lambda p: len(json.dumps(p)), reverse=True):
        if size() <= limit:
            break
        if proc.get("dump") is not None:
            proc["dump"], proc["error"] = None, f"left out: the node's answer must fit {limit} bytes"
    return processes


def torch_dump_files(directory: Path, max_bytes: int, max_age_s: float, max_files: int,
                     entries_per_group: int) -> list[dict[str, Any]]:  # fmt: skip
    """The dumps torch wrote on a watchdog timeout (``TORCH_NCCL_DEBUG_INFO_TEMP_FILE``'s directory) within
    ``max_age_s``, newest first, at most ``max_files``; each checked like a client's answer (blocking: off the loop)."""
    now = time.time()
    try:
        candidates = [(p, p.lstat()) for p in directory.iterdir()]
    except OSError as exc:
        return [
            {
                "source": str(directory),
                "rank": None,
                "pid": None,
                "dump": None,
                "error": exc.strerror or str(exc),
            }
        ]
    recent = sorted(((p, st) for p, st in candidates if stat.S_ISREG(st.st_mode) and now - st.st_mtime <= max_age_s),
                    key=lambda item: -item[1].st_mtime)  # fmt: skip
    out = []
    for path, st in recent[:max_files]:
        entry: dict[str, Any] = {"source": f"torch file {path.name}", "rank": None, "pid": None, "dump": None,
                                 "error": None}  # fmt: skip
        try:
            if st.st_size > max_bytes:
                raise DumpError(f"{path.name}: {st.st_size} bytes, over the {max_bytes}-byte limit")
            data, dump = bundle_from_torch_file(
                path.read_bytes(), str(path), socket.gethostname(), st.st_mtime_ns
            )
            entry["rank"], entry["dump"] = dump.rank, trim_bundle(json.loads(data), entries_per_group)
        except (DumpError, OSError) as exc:
            entry["error"] = str(exc)
        out.append(entry)
    return out
