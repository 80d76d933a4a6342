"""Job-side signals for training code: heartbeats, bounded sections and timeline markers.

::

    from ranksight import client

    client.start()                              # optional: "expect heartbeats from me" (initial timeout applies)
    for step in range(steps):
        with client.section("forward"):
            ...
        client.heartbeat(step=step, loss=loss)  # liveness + step time
    client.marker("checkpoint saved", epoch=3)

Standard library and ``msgpack`` only: no NATS client, no pydantic, nothing from the agent or the aggregator. Every call
is fire-and-forget: it never raises and never blocks the training step. When the agent is absent or slow the message is
dropped and counted (``client.stats()``); after a failed send the client stays quiet for ``RETRY_AFTER_S`` so a job
without an agent pays only a clock read per call. At exit (``atexit``) the client sends ``end``, so a job that finishes
normally is never reported as overdue.

Wire format (the one place it is written down; the agent decodes it in ``agent/collectors/app_parse.py``)
--------------------------------------------------------------------------------------------------------
A Unix ``SOCK_SEQPACKET`` connection to ``$RANKSIGHT_APP_SOCKET`` (default ``DEFAULT_SOCKET``; the agent's
``agent.collectors.app.socket_path``), one packet per message (seqpacket keeps message boundaries and order, like a
datagram, but is bounded by the socket buffer in bytes, not by ``net.unix.max_dgram_qlen``, which is 10 on many hosts).
Each packet is one msgpack map, at most ``MAX_MESSAGE`` bytes:

=============== ======================================================================================================
key             meaning
=============== ======================================================================================================
``v``           wire version, ``1``; keys are only ever added
``t``           ``start`` | ``heartbeat`` | ``section_open`` | ``section_close`` | ``marker`` | ``end``
``n``           message number of this process (1, 2, ...), in send order
``ts``          client clock, ns since the epoch
``pid``         process id
``rank`` ...    ``rank``, ``local_rank``, ``world_size`` (from ``RANK``/``LOCAL_RANK``/``WORLD_SIZE``, else the
                MPI/Slurm equivalents) and ``job`` (the scheduler job id); null when unknown
``dropped``     messages this process dropped so far
``step``        heartbeat: the training step (optional)
``step_time_s`` heartbeat: mean seconds per step since the previous heartbeat that carried a step
``open``        heartbeat: ids of the sections open right now (lets the receiver close a section whose close was lost)
``section``     section_open / section_close: the section name; ``sid``: its id (per process)
``duration_s``  section_close: seconds it was open; ``ok``: false when the block raised
``timeout_s``   start/heartbeat: the heartbeat timeout, section_open: the section timeout (optional overrides)
``initial_timeout_s`` start: seconds allowed before the first heartbeat (optional override)
``text``        marker text
``fields``      user fields (``**fields``): a map of str -> str | int | float | bool | null
=============== ======================================================================================================

From the agent (the same connection, the other way): ``{"v": 1, "t": "action", "action": "checkpoint" | "exit",
"id", "rule", "reason"}`` when an action policy of the aggregator asks the job to checkpoint now or to exit for a restart
without the bad node (docs/actions.md). A process that registered :func:`on_action` gets it as a dict in its callback;
the callback runs on the client's listener thread (keep it short: set a flag the training loop reads). Delivery needs
the connection, so it starts once the process has sent anything (``start`` or a heartbeat).

After the first message is sent, a second connection answers the agent's hang-dump requests from a thread of its own
(Python stacks and torch's Flight Recorder): :mod:`ranksight.client.dumps`.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import select
import socket
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

import msgpack

from ranksight.client.dumps import ensure_responder

SOCKET_ENV = "RANKSIGHT_APP_SOCKET"
DEFAULT_SOCKET = "/run/ranksight/app.sock"  # where the systemd unit's agent listens
WIRE_VERSION = 1
MAX_MESSAGE = 60 * 1024
RETRY_AFTER_S = 1.0
MAX_TEXT = 4096
LISTEN_POLL_S = 0.5  # how often the listener thread looks again for a connection (none yet, or a new one)
ACTIONS = frozenset({"checkpoint", "exit"})

# Scheduler job ids, first match wins.
JOB_ENV = ("SLURM_JOB_ID", "PBS_JOBID", "LSB_JOBID", "FLUX_JOB_ID", "JOB_ID", "TORCHELASTIC_RUN_ID")
RANK_ENV = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID")
LOCAL_RANK_ENV = ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID")
WORLD_SIZE_ENV = ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS")


def _first_env(names: tuple[str, ...]) -> str | None:
    for name in names:
        value = os.environ.get(name)
        if value:
            return value
    return None


def _first_int_env(names: tuple[str, ...]) -> int | None:
    value = _first_env(names)
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def identity() -> dict[str, Any]:
    """Who this process is, from the launcher's and the scheduler's environment."""
    return {
        "pid": os.getpid(),
        "rank": _first_int_env(RANK_ENV),
        "local_rank": _first_int_env(LOCAL_RANK_ENV),
        "world_size": _first_int_env(WORLD_SIZE_ENV),
        "job": _first_env(JOB_ENV),
    }


def _field_value(value: Any) -> Any:
    return value if value is None or isinstance(value, str | int | float | bool) else str(value)


class Client:
    """One sender per process. Thread-safe enough for training code: counters may race, sends never do harm."""

    def __init__(self, socket_path: str | None = None, heartbeat_interval_s: float = 1.0) -> None:
        self.socket_path = socket_path or os.environ.get(SOCKET_ENV) or DEFAULT_SOCKET
        # Heartbeats closer together than this are coalesced (not sent): liveness needs seconds, not every step.
        self.heartbeat_interval_s = heartbeat_interval_s
        self._reset()

    def _reset(self) -> None:
        self._sock: socket.socket | None = None
        self._ident = identity()
        self._numbers = itertools.count(1)
        self._section_ids = itertools.count(1)
        self._open: dict[int, str] = {}
        self._retry_at = 0.0
        self._last_beat = -float("inf")  # monotonic time of the last heartbeat sent
        self._last_step: tuple[float, int] | None = (
            None  # (monotonic, step) of the last heartbeat with a step
        )
        self._ended = False
        self._responding = False  # this process's dump responder was started
        self.sent = 0
        self.dropped = 0
        self.coalesced = 0
        self._on_action: Callable[[dict[str, Any]], None] | None = None
        self._listener: threading.Thread | None = None
        self.actions_received = 0  # action requests from the agent (on_action)
        self.callback_errors = 0  # ... whose callback raised

    # -- public calls -------------------------------------------------------------------------------------------
    def start(
        self, timeout_s: float | None = None, initial_timeout_s: float | None = None, **fields: Any
    ) -> None:
        self._send("start", {"timeout_s": timeout_s, "initial_timeout_s": initial_timeout_s}, fields)

    def heartbeat(self, step: int | None = None, timeout_s: float | None = None, **fields: Any) -> None:
        now = time.monotonic()
        if now - self._last_beat < self.heartbeat_interval_s:
            self.coalesced += 1
            return
        self._last_beat = now
        step_time = None
        if step is not None:
            if self._last_step is not None and step > self._last_step[1]:
                step_time = (now - self._last_step[0]) / (step - self._last_step[1])
            self._last_step = (now, step)
        body = {"step": step, "step_time_s": step_time, "open": list(self._open), "timeout_s": timeout_s}
        self._send("heartbeat", body, fields)

    def section(self, name: str, timeout_s: float | None = None, **fields: Any) -> Section:
        return Section(self, name, timeout_s, fields)

    def marker(self, text: str, **fields: Any) -> None:
        self._send("marker", {"text": str(text)[:MAX_TEXT]}, fields)

    def end(self) -> None:
        if not self._ended and self.sent:
            self._ended = True
            self._send("end", {}, {})

    def stats(self) -> dict[str, int]:
        return {"sent": self.sent, "dropped": self.dropped, "coalesced": self.coalesced}

    def on_action(self, callback: Callable[[dict[str, Any]], None]) -> None:
        """Call ``callback(request)`` when the aggregator asks this job to act (``request["action"]``: ``checkpoint``
        or ``exit``; ``id``, ``rule``, ``reason``). Runs on a daemon thread; what the callback raises is counted."""
        self._on_action = callback
        if self._listener is None:
            self._listener = threading.Thread(
                target=self._listen, name="ranksight-client-listener", daemon=True
            )
            self._listener.start()

    def _listen(self) -> None:
        while True:
            sock = self._sock
            if sock is None:
                time.sleep(LISTEN_POLL_S)
                continue
            try:
                ready, _, _ = select.select([sock], [], [], LISTEN_POLL_S)
                data = sock.recv(MAX_MESSAGE, socket.MSG_DONTWAIT) if ready else None
            except (OSError, ValueError):  # closed under us (a reconnect): take the next one
                time.sleep(LISTEN_POLL_S)
                continue
            if data == b"":  # the agent went away; the next send reconnects
                time.sleep(LISTEN_POLL_S)
            elif data:
                self._deliver(data)

    def _deliver(self, data: bytes) -> None:
        try:
            message = msgpack.unpackb(data, raw=False)
        except Exception:
            return
        if not (
            isinstance(message, dict) and message.get("t") == "action" and message.get("action") in ACTIONS
        ):
            return
        self.actions_received += 1
        request = {k: message.get(k) for k in ("action", "id", "rule", "reason")}
        try:
            if self._on_action is not None:
                self._on_action(request)
        except Exception:  # the training code's own bug must not end the listener
            self.callback_errors += 1

    # -- sending ------------------------------------------------------------------------------------------------
    def _open_section(self, name: str, timeout_s: float | None, fields: dict[str, Any]) -> int:
        sid = next(self._section_ids)
        self._open[sid] = name
        self._send("section_open", {"section": name, "sid": sid, "timeout_s": timeout_s}, fields)
        return sid

    def _close_section(self, sid: int, duration_s: float, ok: bool) -> None:
        name = self._open.pop(sid, None)
        self._send("section_close", {"section": name, "sid": sid, "duration_s": duration_s, "ok": ok}, {})

    def _send(self, kind: str, body: dict[str, Any], fields: dict[str, Any]) -> None:
        if time.monotonic() < self._retry_at:  # the agent was absent a moment ago: drop without a syscall
            self.dropped += 1
            return
        try:
            data = self._encode(kind, body, fields)
            try:
                self._sendmsg(data)
            except (BrokenPipeError, ConnectionResetError):
                self._close()  # the agent restarted: reconnect once, so a restart loses nothing
                self._sendmsg(data)
        except (FileNotFoundError, ConnectionRefusedError, PermissionError, NotADirectoryError):
            self._close()
            self.dropped += 1
            self._retry_at = time.monotonic() + RETRY_AFTER_S
        except (
            Exception
        ):  # a full socket buffer (agent slow), an odd field: never the training step's problem
            self.dropped += 1
        else:
            self.sent += 1
            if kind != "end":
                _register_exit_hook()
                if not self._responding:
                    self._responding = True
                    with contextlib.suppress(
                        Exception
                    ):  # no thread to spare: hang dumps go unanswered, training goes on
                        ensure_responder(self.socket_path, self._ident)

    def _encode(self, kind: str, body: dict[str, Any], fields: dict[str, Any]) -> bytes:
        message = {"v": WIRE_VERSION, "t": kind, "n": next(self._numbers), "ts": time.time_ns(),
                   **self._ident, "dropped": self.dropped}  # fmt: skip
        message.update((k, v) for k, v in body.items() if v is not None)
        if fields:
            message["fields"] = {str(k): _field_value(v) for k, v in fields.items()}
        data: bytes = msgpack.packb(message, use_bin_type=True)
        if len(data) > MAX_MESSAGE:
            raise ValueError("message too large")
        return data

    def _sendmsg(self, data: bytes) -> None:
        if self._sock is None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            sock.setblocking(False)
            try:
                sock.connect(self.socket_path)
            except BaseException:
                sock.close()
                raise
            self._sock = sock
        self._sock.send(data, socket.MSG_NOSIGNAL)

    def _close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


class Section:
    """``with client.section("checkpoint_save"):`` sends section_open on entry and section_close on exit."""

    __slots__ = ("_client", "_fields", "_name", "_sid", "_started", "_timeout_s")

    def __init__(self, client: Client, name: str, timeout_s: float | None, fields: dict[str, Any]) -> None:
        self._client, self._name, self._timeout_s, self._fields = client, name, timeout_s, fields
        self._sid = 0
        self._started = 0.0

    def __enter__(self) -> Section:
        self._started = time.monotonic()
        self._sid = self._client._open_section(self._name, self._timeout_s, self._fields)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._client._close_section(self._sid, time.monotonic() - self._started, exc_type is None)


_default = Client()
_hook_lock = threading.Lock()
_hook_registered = False


def _register_exit_hook() -> None:
    global _hook_registered
    if not _hook_registered:
        with _hook_lock:
            if not _hook_registered:
                atexit.register(lambda: _default.end())
                _hook_registered = True


def configure(socket_path: str | None = None, heartbeat_interval_s: float = 1.0) -> Client:
    """Replace the module's default client (e.g. another socket, or every heartbeat sent)."""
    global _default
    _default = Client(socket_path, heartbeat_interval_s)
    return _default


def _after_fork() -> None:
    # A forked child (a data loader worker) is another process: its own identity, counters and socket.
    if _default._sock is not None:
        _default._sock.close()
    _default._reset()


os.register_at_fork(after_in_child=_after_fork)


def start(timeout_s: float | None = None, initial_timeout_s: float | None = None, **fields: Any) -> None:
    """Announce this rank: heartbeats are expected from now on (the initial timeout runs until the first)."""
    _default.start(timeout_s, initial_timeout_s, **fields)


def heartbeat(step: int | None = None, timeout_s: float | None = None, **fields: Any) -> None:
    """This rank is alive (at ``step``); the heartbeat timeout restarts."""
    _default.heartbeat(step, timeout_s, **fields)


def section(name: str, timeout_s: float | None = None, **fields: Any) -> Section:
    """A bounded block: the rank is flagged if it stays open longer than its timeout."""
    return _default.section(name, timeout_s, **fields)


def marker(text: str, **fields: Any) -> None:
    """A point on the job's timeline ("epoch 3 started", "checkpoint saved")."""
    _default.marker(text, **fields)


def end() -> None:
    """This rank finished normally (sent automatically at exit)."""
    _default.end()


def stats() -> dict[str, int]:
    """Messages sent, dropped (agent absent or slow) and coalesced (heartbeats closer than the interval)."""
    return _default.stats()


def on_action(callback: Callable[[dict[str, Any]], None]) -> None:
    """``callback(request)`` when an action policy asks this job to ``checkpoint`` now or ``exit`` for a restart."""
    _default.on_action(callback)
