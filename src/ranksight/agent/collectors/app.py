"""``app``: serves the Unix seqpacket socket that training processes send heartbeats, sections and markers to.

One connection per process (wire format: :mod:`ranksight.client`). Durable: these records are never dropped by the
publisher (backpressure instead). When the agent is slow the socket buffer fills and the *client* drops and counts, so
the training step never waits. Packets already queued on a connection are read in one go and emitted as one batch. A socket file left by a dead agent is replaced; one served by a live agent is not
(``absent``: two agents on one node would steal each other's traffic).

The ``app_signal`` command (an action policy's ``job_signal``, docs/actions.md) sends one ``action`` packet back over
the connections of the processes of a job, to their :func:`ranksight.client.on_action` callbacks. Only the two known
requests (``checkpoint``, ``exit``) are relayed; nothing received is run by the agent.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import stat
import struct
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgpack

from ranksight.agent.collectors.app_dumps import DumpChannels, fit_reply, torch_dump_files
from ranksight.agent.collectors.app_parse import AppMessageError, Timeouts, dump_hello, parse_message
from ranksight.agent.collectors.base import CollectorUnavailable, Emit, StreamingCollector
from ranksight.agent.collectors.settings import AppSettings
from ranksight.agent.collectors.torch_sources import trigger_debug_pipes, worker_server_dumps
from ranksight.client import ACTIONS, MAX_MESSAGE, WIRE_VERSION
from ranksight.schemas.records import AppRecord

if TYPE_CHECKING:
    from ranksight.agent.runtime import AgentContext

LISTEN_BACKLOG = 256
RECV_BUFFER_BYTES = 4 * 1024 * 1024
MAX_BATCH = 1000
MAX_SIGNAL_TEXT = 1000  # characters of an app_signal's id, rule and reason relayed


def _served_by_live_process(path: Path) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        probe.connect(str(path))
    except OSError:
        return False
    finally:
        probe.close()
    return True


def bind_socket(path: Path, mode: int) -> socket.socket:
    """Bind and listen on a non-blocking seqpacket socket at ``path``, replacing a stale socket file (never any other file)."""
    if path.exists() or path.is_symlink():
        if not stat.S_ISSOCK(path.lstat().st_mode):
            raise CollectorUnavailable(f"{path} exists and is not a socket")
        if _served_by_live_process(path):
            raise CollectorUnavailable(f"{path} is served by another process")
        path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        sock.bind(str(path))
        os.chmod(path, mode)
        sock.listen(LISTEN_BACKLOG)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


class MarkerLimit:
    """At most ``per_minute`` markers per process (by the pid the kernel vouches for, ``SO_PEERCRED``: a process can
    neither borrow another's allowance nor reset its own by reconnecting); the rest are dropped and counted."""

    def __init__(self, per_minute: int) -> None:
        self.per_minute = per_minute
        self.dropped = 0
        self._minutes: dict[int, tuple[float, int]] = {}  # pid -> (its minute began, markers in it)

    def allow(self, pid: int, now: float) -> bool:
        began, count = self._minutes.get(pid, (now, 0))
        if now - began >= 60:
            began, count = now, 0
        if count >= self.per_minute:
            self.dropped += 1
            return False
        self._minutes[pid] = (began, count + 1)
        if len(self._minutes) > 4096:  # bounded: processes without a marker this minute are forgotten
            self._minutes = {p: v for p, v in self._minutes.items() if now - v[0] < 60}
        return True


def peer_pid(conn: socket.socket) -> int:
    """The pid of the process at the other end of a Unix socket, as the kernel has it (-1 where unknown)."""
    try:
        pid, _, _ = struct.unpack(
            "3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        )
    except OSError:
        return -1
    return int(pid)


class AppCollector(StreamingCollector):
    name = "app"
    kind = "app"
    durable = True

    def __init__(self, ctx: AgentContext, settings: AppSettings) -> None:
        super().__init__(ctx, settings)
        self.app_settings = settings
        self.timeouts = Timeouts(
            heartbeat_s=settings.heartbeat_timeout_s,
            initial_s=settings.heartbeat_initial_timeout_s,
            section_s=settings.section_timeout_s,
            per_section=dict(settings.section_timeouts),
        )
        self.received = 0
        self.rejected = 0
        self.markers = MarkerLimit(settings.max_markers_per_minute)
        self._sock: socket.socket | None = None
        self._inode = 0  # of the socket file we bound, to never remove a newer agent's
        self.processes: dict[socket.socket, AppRecord] = {}  # connection -> the last record its process sent
        ctx.add_command("app_signal", self.signal)
        self.dumps = DumpChannels(settings)
        ctx.add_command("hang_dump", self._hang_dump)

    async def _hang_dump(self, request: dict[str, Any]) -> dict[str, Any]:
        """Dumps of this node's processes of ``job`` (every process when absent): Flight Recorder and Python stacks."""
        job = request.get("job")
        if job is not None and not isinstance(job, str):
            raise ValueError("job must be a string")
        per_group = request.get("entries_per_group", self.app_settings.dump_entries_per_group)
        if not isinstance(per_group, int) or not 1 <= per_group <= self.app_settings.dump_entries_per_group:
            raise ValueError(f"entries_per_group must be 1..{self.app_settings.dump_entries_per_group}")
        # the sources at once: a process answers its client's request while torch's servers and pipes answer theirs
        answers = await asyncio.gather(self.dumps.dump_job(job, per_group), self._torch_dumps(job, per_group))
        processes = [proc for answer in answers for proc in answer]
        # half the server's max_payload: the reply's JSON framing stays well within it
        return {"node": self.ctx.node, "processes": fit_reply(processes, self.ctx.nc.max_payload // 2)}

    async def _torch_dumps(self, job: str | None, per_group: int) -> list[dict[str, Any]]:
        """What torch's own sources give, where configured: its worker servers, its debug pipes (then its files)."""
        cfg = self.app_settings
        processes: list[dict[str, Any]] = []
        if cfg.torch_worker_sockets is not None:
            processes += await worker_server_dumps(cfg.torch_worker_sockets, job, cfg.dump_max_bytes, cfg.dump_timeout_s,
                                                   cfg.dump_concurrency, cfg.dump_max_files, per_group)  # fmt: skip
        if cfg.torch_debug_pipe_prefix is not None:
            asked, unasked = await asyncio.to_thread(trigger_debug_pipes, cfg.torch_debug_pipe_prefix,
                                                     cfg.dump_max_files)  # fmt: skip
            processes += unasked
            if asked:
                await asyncio.sleep(cfg.torch_pipe_wait_s)  # torch looks at its pipe about once a second
        if cfg.torch_dump_dir is not None:
            processes += await asyncio.to_thread(torch_dump_files, cfg.torch_dump_dir, cfg.dump_max_bytes,
                                                 cfg.torch_dump_max_age_s, cfg.dump_max_files, per_group)  # fmt: skip
        return processes

    async def run(self, emit: Emit) -> None:
        path = self.ctx.settings.app_socket_path()
        self._sock = sock = bind_socket(path, self.app_settings.socket_mode)
        self._inode = path.stat().st_ino
        self.health.source = str(path)
        loop = asyncio.get_running_loop()
        connections: set[asyncio.Task[None]] = set()
        try:
            while True:
                conn, _ = await loop.sock_accept(sock)
                task = asyncio.create_task(self._serve(conn, emit))
                connections.add(task)
                task.add_done_callback(connections.discard)
        finally:
            for task in list(connections):
                task.cancel()
            await asyncio.gather(*connections, return_exceptions=True)
            self._close(path)

    async def _serve(self, conn: socket.socket, emit: Emit) -> None:
        """One training process: read its packets until it disconnects."""
        loop = asyncio.get_running_loop()
        conn.setblocking(False)
        with contextlib.suppress(OSError):  # a larger buffer absorbs bursts; the kernel may cap it
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECV_BUFFER_BYTES)
        pid = peer_pid(conn)
        try:
            first = await loop.sock_recv(conn, MAX_MESSAGE + 1)
            hello = dump_hello(first)
            if hello is not None:  # the process's dump connection (ranksight.client.dumps), not its signals
                await self.dumps.serve(conn, hello)
                return
            while True:
                if not first:
                    return  # the process closed its end (exited)
                records = self._limited(pid, self._parse_all([first, *self._drain(conn)]))
                if records:
                    self.processes[conn] = records[-1]
                    await emit(records)
                    self.health.success(0.0)
                first = await loop.sock_recv(conn, MAX_MESSAGE + 1)
        except ConnectionError:
            return
        finally:
            self.processes.pop(conn, None)
            conn.close()

    async def signal(self, request: dict[str, Any]) -> dict[str, Any]:
        """Relay an action request to the processes of ``job`` (every connected process if it is null)."""
        action, job = request.get("action"), request.get("job")
        if action not in ACTIONS:
            raise ValueError(f"action must be one of {', '.join(sorted(ACTIONS))}")
        if job is not None and not isinstance(job, str):
            raise ValueError("job must be a string or null")
        text = {k: str(request.get(k) or "")[:MAX_SIGNAL_TEXT] for k in ("id", "rule", "reason")}
        packet = msgpack.packb(
            {"v": WIRE_VERSION, "t": "action", "action": action, **text}, use_bin_type=True
        )
        delivered = []
        for conn, last in list(self.processes.items()):
            if job is not None and last.job_id != job:
                continue
            try:
                conn.send(packet, socket.MSG_DONTWAIT | socket.MSG_NOSIGNAL)
                delivered.append(last.pid)
            except OSError:  # gone or its buffer full: that process is not told (the answer says who was)
                continue
        return {"delivered": len(delivered), "pids": sorted(delivered)}

    def _drain(self, conn: socket.socket) -> list[bytes]:
        out: list[bytes] = []
        while len(out) < MAX_BATCH:
            try:
                data = conn.recv(MAX_MESSAGE + 1)
            except BlockingIOError:
                break
            if not data:  # end of stream: the next sock_recv sees it too
                break
            out.append(data)
        return out

    def _limited(self, pid: int, records: list[AppRecord]) -> list[AppRecord]:
        """``records`` without the markers over the process's allowance (``max_markers_per_minute``)."""
        now = time.monotonic()
        kept = [r for r in records if r.event != "marker" or self.markers.allow(pid, now)]
        if len(kept) < len(records):
            self.health.last_error = (f"markers over {self.markers.per_minute} a minute from pid {pid} dropped "
                                      f"({self.markers.dropped} so far)")  # fmt: skip
        return kept

    def _parse_all(self, packets: list[bytes]) -> list[AppRecord]:
        records = []
        for data in packets:
            self.received += 1
            try:
                records.append(parse_message(data, self.timeouts))
            except AppMessageError as exc:
                self.rejected += 1
                self.health.last_error = f"rejected client message: {exc}"[:500]
        return records

    def _close(self, path: Path) -> None:
        if self._sock is None:
            return
        with contextlib.suppress(OSError):
            if path.stat().st_ino == self._inode:
                path.unlink()
        self._sock.close()
        self._sock = None

    async def close(self) -> None:
        self._close(self.ctx.settings.app_socket_path())
