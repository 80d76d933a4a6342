"""The CLI never hangs: with NATS unreachable every command gives up after ``nats.connect_timeout_s`` with exit 1 and a
one-line reason; every long-running command stops on the first SIGINT/SIGTERM whatever NATS is doing, and a second
signal forces it. Real ``ranksight`` processes, a real nats-server (killed mid-command), real sockets."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ranksight.core.natsserver import NatsServer
from ranksight.settings import Settings
from tests.conftest import REPO
from tests.support import ranksight_cmd, settings_env

CONNECT_TIMEOUT_S = 1.0
# Generous: these bound a hang, not a speed; the machine running the tests may be loaded.
GIVE_UP_WITHIN_S = 60.0

QUERY_COMMANDS = [
    ["status"],
    ["nodes", "--json"],
    ["alerts"],
    ["sql", "SELECT 1"],
    ["jobs"],
    ["stragglers"],
    ["links"],
    ["markers"],
    ["gpus"],
    ["nics"],
]
LONG_RUNNING = [["agent"], ["aggregator"], ["alerts", "--follow"]]


@pytest.fixture
def refusing_port() -> Iterator[int]:
    """A port nothing listens on (held bound so nobody else takes it): connections are refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts TCP connections and never says a word (a firewall or a wedged server)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        yield sock.getsockname()[1]


def _env(settings: Settings, url: str) -> dict[str, str]:
    env = settings_env(settings)
    env.update(
        RANKSIGHT_NATS__URL=url,
        RANKSIGHT_NATS__CONNECT_TIMEOUT_S=str(CONNECT_TIMEOUT_S),
        RANKSIGHT_AGGREGATOR__HTTP__ENABLED="false",
    )
    return env


def _run_all(
    commands: list[list[str]], env: dict[str, str], at_once: int = 3
) -> list[tuple[list[str], int, str]]:
    """Run ``commands`` a few at a time (one at a time takes minutes; all at once overloads a small machine) and
    return each one's exit code and stderr; each has ``GIVE_UP_WITHIN_S`` from its own start."""
    results = []
    for first in range(0, len(commands), at_once):
        batch = [(c, time.monotonic(), subprocess.Popen(ranksight_cmd(*c), env=env, stdout=subprocess.PIPE,
                                                        stderr=subprocess.PIPE, text=True))
                 for c in commands[first : first + at_once]]  # fmt: skip
        for command, started, proc in batch:
            try:
                _, err = proc.communicate(timeout=max(1.0, started + GIVE_UP_WITHIN_S - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                _, err = proc.communicate()
                pytest.fail(
                    f"ranksight {' '.join(command)} still running after {GIVE_UP_WITHIN_S}s: {err[-2000:]}"
                )
            results.append((command, proc.returncode, err))
    return results


@pytest.mark.parametrize("unreachable", ["refusing_port", "silent_port"])
def test_every_command_gives_up_on_an_unreachable_nats(
    settings: Settings, tmp_path: Path, unreachable: str, request: pytest.FixtureRequest
) -> None:
    url = f"nats://127.0.0.1:{request.getfixturevalue(unreachable)}"
    wheel = tmp_path / "ranksight-0-py3-none-any.whl"
    wheel.write_bytes(b"")  # deploy must give up on NATS before it touches a host or reads the wheel
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1\n")
    deploy = ["deploy", "--hosts", str(hosts), "--wheel", str(wheel)]
    for command, code, err in _run_all([*QUERY_COMMANDS, *LONG_RUNNING, deploy], _env(settings, url)):
        name = " ".join(command[:2])
        assert code == 1, f"{name}: exit {code}: {err[-2000:]}"
        assert "Traceback" not in err, f"{name}: {err}"
        reason = [line for line in err.splitlines() if url in line]
        assert reason and "cannot connect to NATS" in reason[0], f"{name}: {err}"


def _start(command: list[str], env: dict[str, str], ready: str) -> subprocess.Popen[str]:
    """Start ``ranksight <command>`` and wait for ``ready`` on its stderr (logs and notices go there)."""
    proc = subprocess.Popen(ranksight_cmd(*command), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)  # fmt: skip
    assert proc.stderr is not None
    deadline = time.monotonic() + 60
    seen = []
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        seen.append(line)
        if ready in line:
            return proc
    proc.kill()
    pytest.fail(f"ranksight {' '.join(command)} never printed {ready!r}: {''.join(seen)[-3000:]}")


READY = {"agent": "agent ", "aggregator": "aggregator ready", "alerts": "following alerts"}
# Agents and aggregators are services (stopped by their manager: 0); an interactive command reports Ctrl-C.
EXIT_ON_SIGNAL = {"agent": {signal.SIGINT: 0, signal.SIGTERM: 0}, "aggregator": {signal.SIGINT: 0, signal.SIGTERM: 0},
                  "alerts": {signal.SIGINT: 130, signal.SIGTERM: 0}}  # fmt: skip


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("command", LONG_RUNNING, ids=lambda c: " ".join(c))
def test_long_running_commands_stop_on_one_signal_after_nats_died(
    settings: Settings, nats_server: NatsServer, command: list[str], signum: signal.Signals
) -> None:
    env = _env(settings, nats_server.url)
    env["RANKSIGHT_AGENT__COLLECTORS__HEARTBEAT__INTERVAL_S"] = "0.2"
    proc = _start(command, env, READY[command[0]])
    try:
        assert nats_server.process is not None
        nats_server.process.kill()  # NATS dies mid-command: the client is now reconnecting forever
        nats_server.process.wait()
        time.sleep(1.0)
        started = time.monotonic()
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=GIVE_UP_WITHIN_S)
    finally:
        proc.kill()
    assert "Traceback" not in err, err
    assert proc.returncode == EXIT_ON_SIGNAL[command[0]][signum], err[-2000:]
    # The default shutdown_timeout_s (10 s) bounds it; the agent's own bound is one publish_timeout_s (5 s).
    assert time.monotonic() - started < GIVE_UP_WITHIN_S


STUCK_MAIN = """
import asyncio, sys
from ranksight.core.aio import run_until_signalled

async def main(stop):
    print("ready", file=sys.stderr, flush=True)
    await stop.wait()
    while True:  # an orderly stop that never ends (a flush waiting on a dead NATS)
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            if sys.argv[2] == "deaf":  # even ignores cancellation
                continue
            raise

timeout = None if sys.argv[1] == "none" else float(sys.argv[1])
print("stopped by", run_until_signalled(main, timeout), flush=True)
"""


@pytest.mark.parametrize(
    ("timeout", "mode", "signals", "code", "out"),
    [
        ("1", "cancellable", 1, 0, "stopped by 15"),  # cancelled at shutdown_timeout_s
        ("none", "cancellable", 2, 0, "stopped by 15"),  # cancelled at the second signal
        ("none", "deaf", 2, 143, ""),  # the process ends FORCE_EXIT_S after the second signal
    ],
)
def test_a_stuck_stop_ends_at_shutdown_timeout_or_second_signal(
    timeout: str, mode: str, signals: int, code: int, out: str
) -> None:
    proc = subprocess.Popen([sys.executable, "-c", STUCK_MAIN, timeout, mode], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=REPO)  # fmt: skip
    try:
        assert proc.stderr is not None and proc.stderr.readline().strip() == "ready"
        for _ in range(signals):
            proc.send_signal(signal.SIGTERM)
            time.sleep(0.3)
        stdout, err = proc.communicate(timeout=GIVE_UP_WITHIN_S)
    finally:
        proc.kill()
    assert proc.returncode == code, err
    assert stdout.strip() == out
    assert "Traceback" not in err
