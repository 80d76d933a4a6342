"""A fake RAS endpoint for tests and ``ranksight demo``, faithful to NCCL's ``src/ras/client_support.cc``:

- newline-terminated commands, case-insensitive, ``\\r`` tolerated; ``CLIENT PROTOCOL n`` -> ``SERVER PROTOCOL 2``
  whatever ``n``; ``TIMEOUT <s>`` parsed as ``strtol`` does up to 2.30 (an integer, optional sign and leading blanks,
  an empty value is 0; anything after the digits, a fraction or an exponent, or a negative value -> ``ERROR: Invalid
  timeout value <s>``) and as ``strtod`` does from 2.31.2 (fractions, exponents and hex floats accepted; out of range,
  not finite or negative refused); unknown commands -> one line ``ERROR: Unknown command <line as sent>`` and the
  connection stays open;
- ``STATUS`` / ``VERBOSE STATUS``: the reply is sent as several messages (header, table, errors, warnings: here
  chunks with short pauses) and the server closes the connection after it; EOF ends the reply;
- version profiles: 2.24/2.26 know neither ``SET FORMAT`` nor ``MONITOR``; 2.28.7/2.28.9 have ``SET FORMAT json``
  and emit the missing-comma bug after ``"nvml_dev": N`` in ``missing_ranks[]``; 2.29+ add ``MONITOR [groups]``
  (comma-separated ``lifecycle``, ``trace``, ``all``, case-insensitive, default lifecycle; any other word ->
  ``ERROR: Invalid event group '<word>'``), sending only the events of the requested groups, as text lines
  ``[time] EVENT: Process P on node H managing GPU(s) G[ (NVML N)] details`` (``[time] EVENT: addr<port> details``
  for a peer the server cannot name) or pretty-printed JSON objects with arrays on one line
  (``fixtures/ras/upstream-server/monitor_events_by_version_and_group.txt``);
- 2.31+ add ``CONTROL <sub>`` (a space after ``CONTROL`` is part of the command: a bare ``CONTROL`` is unknown);
  ``PROFILER_MASK <value>`` (again with its space; the value after the blanks that follow it, parsed as
  :func:`agent.collectors.ras.control.parse_profiler_mask`, i.e. as the server's ``rasParseProfilerMask``) -> ``OK``,
  ``ERROR: Invalid profiler mask value '<value>'``; any other subcommand -> ``ERROR: Unknown CONTROL subcommand
  '<the rest of the line>'``; the connection stays open (the masks set are kept in ``profiler_masks``);
- 2.31+ add ``DIAGNOSTICS``: text only (in JSON format ``ERROR: diagnostics only supports text output``), one run at a
  time (a concurrent request gets ``BUSY: diagnostics already in progress``); the reply (``diagnostics_reply``, the
  whole text the test sets, normally a fixture of ``fixtures/ras/diagnostics/``) comes after ``diagnostics_delay_s``
  (the gathering collective) and the server closes the connection after any of these answers, as after a status
  (RCCL's microtests of ``client_support.cc``: the client is FINISHED);
- faults for the client's error paths: ``silent`` (accepts, never answers), ``reset`` (half a reply, then RST), and a
  status body that starts only after ``first_byte_delay_s`` (a degraded job's gathering timeouts).

The reply contents are whatever the test or demo sets (normally the captured fixtures).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import re
import socket
import struct
import sys
from dataclasses import dataclass, field
from typing import Literal

from ranksight.agent.collectors.ras.client import MONITOR_GROUPS
from ranksight.agent.collectors.ras.control import parse_profiler_mask
from ranksight.schemas.records.ras import RasEvent

Fault = Literal["none", "silent", "reset"]


@dataclass(frozen=True)
class Profile:
    version: str
    json: bool  # SET FORMAT json (2.28.7+)
    monitor: bool  # MONITOR (2.29+)
    missing_comma: bool  # the 2.28.7/2.28.9 JSON bug
    control: bool = False  # CONTROL PROFILER_MASK (2.31+)
    diagnostics: bool = False  # DIAGNOSTICS (2.31+)
    float_timeout: bool = False  # TIMEOUT parsed with strtod (2.31.2 and later; 2.30 and before: strtol)


PROFILES = {
    "2.24": Profile("2.24.3", json=False, monitor=False, missing_comma=False),
    "2.26": Profile("2.26.6", json=False, monitor=False, missing_comma=False),
    "2.28.7": Profile("2.28.7", json=True, monitor=False, missing_comma=True),
    "2.28.9": Profile("2.28.9", json=True, monitor=False, missing_comma=True),
    "2.29": Profile("2.29.2", json=True, monitor=True, missing_comma=False),
    "2.30": Profile("2.30.7", json=True, monitor=True, missing_comma=False),
    # 2.31.2 (NVIDIA/nccl 88980683): CONTROL, DIAGNOSTICS and the strtod TIMEOUT already
    "2.31": Profile(
        "2.31.2",
        json=True,
        monitor=True,
        missing_comma=False,
        control=True,
        diagnostics=True,
        float_timeout=True,
    ),
    # RCCL's newest port (ROCm/rocm-systems projects/rccl/src/ras/client_support.cc @ 2386d619): JSON and MONITOR as
    # 2.29/2.30, no CONTROL, no DIAGNOSTICS, TIMEOUT with strtol
    "rccl": Profile("rccl", json=True, monitor=True, missing_comma=False),
    "2.32": Profile(
        "2.32.3",
        json=True,
        monitor=True,
        missing_comma=False,
        control=True,
        diagnostics=True,
        float_timeout=True,
    ),
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


EVENT_GROUPS = dict(zip(MONITOR_GROUPS, ({"LIFECYCLE"}, {"TRACE"}, {"LIFECYCLE", "TRACE"}), strict=True))
TRACE_EVENTS = ("PEER_UNRESPONSIVE", "PEER_RETRY")


def event_group(e: RasEvent) -> str:
    return e.event_group or ("TRACE" if e.event in TRACE_EVENTS else "LIFECYCLE")


def _devices(values: list[int]) -> str:
    return ",".join(str(v) for v in values)


def event_text(e: RasEvent) -> bytes:
    if e.addr is not None:
        peer = e.addr
    else:
        nvml = e.nvml_gpus or e.gpus
        peer = f"Process {e.pid} on node {e.host} managing GPU{'s' if len(e.gpus) > 1 else ''} {_devices(e.gpus)}"
        peer += f" (NVML {_devices(nvml)})" if nvml != e.gpus else ""
    return f"[{e.time}] {e.event}: {peer} {e.details}\n".encode()


def event_json(e: RasEvent) -> bytes:
    """Laid out as upstream writes it: two-space indent, device arrays on one line without spaces."""
    if e.addr is not None:
        peer = f'    "addr": {json.dumps(e.addr)}\n'
    else:
        peer = (f'    "host": {json.dumps(e.host)},\n    "pid": {e.pid},\n    "cuda_devs": [{_devices(e.gpus)}],\n'
                f'    "nvml_devs": [{_devices(e.nvml_gpus or e.gpus)}]\n')  # fmt: skip
    return (f'{{\n  "timestamp": {json.dumps(e.time)},\n  "group": "{event_group(e)}",\n  "event": {json.dumps(e.event)},\n'
            f'  "peer": {{\n{peer}  }},\n  "details": {json.dumps(e.details)}\n}}\n').encode()  # fmt: skip


def strtol_timeout(value: str) -> int | None:
    """``TIMEOUT`` as upstream parses it (``strtol`` base 10, the whole value consumed, not negative); None: invalid."""
    if not value:
        return 0  # no digits: strtol stops at the start, which is the end
    m = re.fullmatch(
        r"[ \t\n\v\f\r]*([+-]?\d+)", value
    )  # with no digits strtol consumes nothing, blanks included
    if m is None:
        return None
    number = int(m.group(1))
    return number if number >= 0 else None


_STRTOD = re.compile(
    r"[ \t\n\v\f\r]*[+-]?(?:"
    r"(?P<hex>0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)(?:[pP][+-]?\d+)?)"
    r"|(?P<dec>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)"
    r"|(?P<special>inf(?:inity)?|nan(?:\([0-9A-Za-z_]*\))?))",
    re.IGNORECASE,
)


def strtod_timeout(value: str) -> float | None:
    """``TIMEOUT`` as NCCL 2.31.2 and later parse it (``strtod``, the whole value consumed, finite, in range, not negative);
    None: invalid."""
    if not value:
        return 0.0  # no number: strtod stops at the start, which is the end
    m = _STRTOD.fullmatch(value)
    if m is None or m["special"]:
        return None  # trailing characters, or not finite
    text = value.strip(" \t\n\v\f\r")
    number = float.fromhex(text) if m["hex"] else float(text)
    digits = m["hex"][2:] if m["hex"] else m["dec"]
    mantissa = re.split(r"[pPeE]", digits)[0]
    if math.isinf(number) or 0 < abs(number) < sys.float_info.min or (number == 0 and mantissa.strip("0.")):
        return None  # errno ERANGE: overflow or underflow
    return number if number >= 0.0 else None


def monitor_groups(spec: str) -> set[str] | str:
    """``MONITOR`` groups as upstream parses them: the set of event groups, or the first invalid word."""
    groups: set[str] = set()
    for word in spec.lstrip(" ").split(","):
        if not word:
            continue  # strtok skips empty tokens
        if word.lower() not in EVENT_GROUPS:
            return word
        groups |= EVENT_GROUPS[word.lower()]
    return groups or EVENT_GROUPS["lifecycle"]


@dataclass
class _Client:
    writer: asyncio.StreamWriter
    json: bool = False
    groups: set[str] = field(default_factory=set)


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
    first_byte_delay_s: float = 0.0  # gathering before the body starts (a degraded job: leg + extra timeouts)
    protocol: int = 2  # what SERVER PROTOCOL says (every upstream release: 2)
    statuses_served: int = 0
    concurrent: int = 0
    max_concurrent: int = 0
    commands: list[str] = field(default_factory=list)
    diagnostics_reply: bytes = b""
    diagnostics_delay_s: float = 0.0
    diagnostics_running: int = 0
    profiler_masks: list[int] = field(default_factory=list)
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
            if event_group(event) not in client.groups:
                continue
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
            writer.write(f"SERVER PROTOCOL {self.protocol}\n".encode())
        elif lower.startswith("timeout "):
            value = line[len("timeout ") :]
            parse = strtod_timeout if self.profile.float_timeout else strtol_timeout
            ok = parse(value) is not None
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
        elif lower.startswith("control ") and self.profile.control:
            sub = line[len("control ") :].lstrip(" ")
            if not sub.lower().startswith("profiler_mask "):
                writer.write(f"ERROR: Unknown CONTROL subcommand '{sub}'\n".encode())
            elif (mask := parse_profiler_mask(value := sub[len("profiler_mask ") :].lstrip(" "))) is None:
                writer.write(f"ERROR: Invalid profiler mask value '{value}'\n".encode())
            else:
                self.profiler_masks.append(mask)
                writer.write(b"OK\n")
        elif lower == "diagnostics" and self.profile.diagnostics:
            await self._diagnostics(client)
            return True
        elif (lower == "monitor" or lower.startswith("monitor ")) and self.profile.monitor:
            groups = monitor_groups(line[len("monitor") :])
            if isinstance(groups, str):
                writer.write(f"ERROR: Invalid event group '{groups}'\n".encode())
            else:
                client.groups = groups
                writer.write(b"OK\n")
                if client not in self._monitors:
                    self._monitors.append(client)
        else:
            writer.write(f"ERROR: Unknown command {line}\n".encode())
        await writer.drain()
        return False

    async def _diagnostics(self, client: _Client) -> None:
        writer = client.writer
        if client.json:
            writer.write(b"ERROR: diagnostics only supports text output\n")
        elif self.diagnostics_running:
            writer.write(b"BUSY: diagnostics already in progress\n")
        else:
            self.diagnostics_running += 1
            try:
                await asyncio.sleep(self.diagnostics_delay_s)
                writer.write(self.diagnostics_reply)
            finally:
                self.diagnostics_running -= 1
        await writer.drain()

    async def _status(self, client: _Client) -> None:
        self.statuses_served += 1
        self.concurrent += 1
        self.max_concurrent = max(self.max_concurrent, self.concurrent)
        try:
            body = self.status_text
            if client.json and self.status_json is not None:
                text = self.status_json.decode()
                body = (inject_missing_comma(text) if self.profile.missing_comma else text).encode()
            await asyncio.sleep(self.first_byte_delay_s)
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
