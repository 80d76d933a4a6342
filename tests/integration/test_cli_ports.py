"""Fixed ports fail loudly: when the HTTP port (8080) or the probe port (28100) is taken, ``up`` and ``aggregator``
say which port is in use and exit 1 instead of running without that part; ``--http-port 0`` picks a free one."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from ranksight.settings import Settings, load_settings
from tests.support import ranksight_cmd, settings_env


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield sock.getsockname()[1]


@pytest.mark.parametrize(
    ("command", "flags", "env_key"),
    [
        (["up", "--nats-port", "0"], ["--http-port"], None),
        (["aggregator"], ["--http-port"], None),
        (["up", "--nats-port", "0"], [], "RANKSIGHT_AGENT__COLLECTORS__PROBE__PORT"),
    ],
    ids=["up-http", "aggregator-http", "up-probe"],
)
def test_a_taken_port_is_named_and_fails(
    settings: Settings,
    tmp_path: Path,
    taken_port: int,
    command: list[str],
    flags: list[str],
    env_key: str | None,
) -> None:
    env = settings_env(settings)
    env.pop("RANKSIGHT_AGGREGATOR__HTTP__PORT")
    if env_key:
        env[env_key] = str(taken_port)
        env["RANKSIGHT_AGGREGATOR__HTTP__PORT"] = "0"
    argv = [*command, "--state-dir", str(tmp_path / "s")] if command[0] == "up" else command
    proc = subprocess.run(ranksight_cmd(*argv, *[f for flag in flags for f in (flag, str(taken_port))]), env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    assert f"port {taken_port} in use" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_the_app_socket_belongs_to_the_instance(tmp_path: Path) -> None:
    """Two instances on one machine (two state dirs) listen on two sockets: one's training processes never reach the
    other. An explicit setting still wins."""
    a = load_settings(None, state_dir=tmp_path / "a").app_socket_path()
    b = load_settings(None, state_dir=tmp_path / "b").app_socket_path()
    assert a != b and a.is_relative_to(tmp_path / "a") and b.is_relative_to(tmp_path / "b")
    explicit = load_settings(
        None, state_dir=tmp_path / "a", agent={"collectors": {"app": {"socket_path": "/x.sock"}}}
    )
    assert explicit.app_socket_path() == Path("/x.sock")
