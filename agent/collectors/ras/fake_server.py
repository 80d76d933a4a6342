"""A fake RAS endpoint for tests and ``ranksight demo``, faithful to NCCL's ``src/ras/client_support.cc``:

- newline-terminated commands, case-insensitive, ``\\r`` tolerated; ``CLIENT PROTOCOL n`` -> ``SERVER PROTOCOL 2``;
  ``TIMEOUT <s>`` -> ``OK`` (or ``ERROR: Invalid timeout value ...``); unknown commands -> one line
  ``ERROR: Unknown command <line as sent>`` and the connection stays open;
- ``STATUS`` / ``VERBOSE STATUS``: the reply is sent as several messages (header, table, errors, warnings: here
  chunks with short pauses) and the server closes the connection after it; EOF ends the reply;
- version profiles: 2.24/2.26 know neither ``SET FORMAT`` nor ``MONITOR``; 2.28.7/2.28.9 have ``SET FORMAT json``
  and emit the missing-comma bug after ``"nvml_dev": N`` in ``missing_ranks[]``; 2.29+ add ``MONITOR``, whose events
  are text lines ``[time] EVENT: Process P on node H managing GPU G details`` or pretty-printed JSON objects;
- faults for the client's error paths: ``silent`` (accepts, never answers) and ``reset`` (half a reply, then RST).

The reply contents are whatever the test or demo sets (normally the captured fixtures).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
import struct
from dataclasses import dataclass, field
from typing import Literal

from schemas.records.ras import RasEvent

Fault = Literal["none", "silent", "reset"]


@dataclass(frozen=True)
class Profile:
    version: str
    json: bool  # SET FORMAT json (2.28.7+)
    monitor: bool  # MONITOR (2.29+)
    missing_comma: bool  # the 2.28.7/2.28.9 JSON bug


PROFILES = {
    "2.24": Profile("2.24.3", json=False, monitor=False, missing_comma=False),
    "2.26": Profile("2.26.6", json=False, monitor=False, missing_comma=False),
    "2.28.7": Profile("2.28.7", json=True, monitor=False, missing_comma=True),
    "2.28.9": Profile("2.28.9", json=True, monitor=False, missing_comma=True),
    "2.29": Profile("2.29.2", json=True, monitor=True, missing_comma=False),
}

_NVML_COMMA = re.compile(r'("nvml_dev"\s*:\s*-?\d+),')


def inject_missing_comma(text: str) -> str:
    """Reproduce the 2.28.7/2.28.9 bug: drop the comma after ``nvml_dev`` inside ``missing_ranks[]`` only."""
    head, *pieces = text.split('"missing_ranks"')
    out = [head]
    for piece in pieces:
        end = piece.find("]")
        end = len(piece) if end < 0 else end
        out.append(_NVML_COMMA.sub(r"\1", piece[:end]) + piece[end:])
    return '"missing_ranks"'.join(out)


def event_text(e: RasEvent) -> bytes:
    peer = f"Process {e.pid} on node {e.host} managing GPU{'s' if len(e.gpus) > 1 else ''} " + ",".join(
        str(g) for g in e.gpus
    )
    return f"[{e.time}] {e.event}: {peer} {e.details}\n".encode()


def event_json(e: RasEvent) -> bytes:
    obj = {
        "timestamp": e.time,
        "group": e.event_group or "LIFECYCLE",
        "event": e.event,
        "peer": {"host": e.host, "pid": e.pid, "cuda_devs": e.gpus, "nvml_devs": e.gpus},
        "details": e.details,
    }
    return (json.dumps(obj, indent=2) + "\n").encode()  # fmt: skip


@dataclass
class _Client:
    writer: asyncio.StreamWriter
    json: bool = False


@dataclass
class FakeRasServer:
    profile: Profile
    status_text: bytes
    status_json: bytes | None = None
    host: str = "127.0.0.1"
    port: int = 0
    fault: Fault = "none"
    chunks: int = 4
    pause_s: float = 0.005
    statuses_served: int = 0
    concurrent: int = 0
    max_concurrent: int = 0
    commands: list[str] = field(default_factory=list)
    _server: asyncio.Server | None = None
    _monitors: list[_Client] = field(default_factory=list)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    @property
    def address(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    async def start(self) -> FakeRasServer:
        self._server = await asyncio.start_server(self._serve, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        """The endpoint closes (the job ended): no more connections, monitors see EOF."""
        if self._server is not None:
            self._server.close()
            self._server = None
        for client in self._monitors:
            client.writer.close()
        self._monitors.clear()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def __aenter__(self) -> FakeRasServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def push_event(self, event: RasEvent) -> None:
        for client in list(self._monitors):
            try:
                client.writer.write(event_json(event) if client.json else event_text(event))
                await client.writer.drain()
            except (ConnectionError, RuntimeError):
                self._monitors.remove(client)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        client = _Client(writer)
        try:
            if self.fault == "silent":
                await reader.read()  # never answers; the client's deadline must fire
                return
            while raw := await reader.readline():
                line = raw.decode(errors="replace").rstrip("\n").rstrip("\r")
                self.commands.append(line)
                if await self._command(line, client):
                    return
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            self._tasks.discard(task)
            if client not in self._monitors:
                with contextlib.suppress(Exception):
                    writer.close()

    async def _command(self, line: str, client: _Client) -> bool:
        """Answer one command; True when the connection is done (after a status)."""
        lower, writer = line.lower(), client.writer
        if lower.startswith("client protocol "):
            writer.write(b"SERVER PROTOCOL 2\n")
        elif lower.startswith("timeout "):
            value = line[len("timeout ") :]
            try:
                ok = float(value) >= 0
            except ValueError:
                ok = False
            writer.write(b"OK\n" if ok else f"ERROR: Invalid timeout value {value}\n".encode())
        elif lower.startswith("set format ") and self.profile.json:
            fmt = lower[len("set format ") :]
            if fmt in ("json", "text"):
                client.json = fmt == "json"
                writer.write(b"OK\n")
            else:
                writer.write(f"ERROR: Invalid format {line[len('set format ') :]}\n".encode())
        elif lower in ("status", "verbose status"):
            await self._status(client)
            return True
        elif (lower == "monitor" or lower.startswith("monitor ")) and self.profile.monitor:
            writer.write(b"OK\n")
            self._monitors.append(client)
        else:
            writer.write(f"ERROR: Unknown command {line}\n".encode())
        await writer.drain()
        return False

    async def _status(self, client: _Client) -> None:
        self.statuses_served += 1
        self.concurrent += 1
        self.max_concurrent = max(self.max_concurrent, self.concurrent)
        try:
            body = self.status_text
            if client.json and self.status_json is not None:
                text = self.status_json.decode()
                body = (inject_missing_comma(text) if self.profile.missing_comma else text).encode()
            step = max(1, -(-len(body) // self.chunks))
            for i in range(0, len(body), step):
                if self.fault == "reset" and i >= len(body) // 2:
                    sock = client.writer.get_extra_info("socket")
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    client.writer.transport.abort()
                    return
                client.writer.write(body[i : i + step])
                await client.writer.drain()
                await asyncio.sleep(self.pause_s)
            await client.writer.drain()
        finally:
            self.concurrent -= 1
