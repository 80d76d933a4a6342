"""Chaos, as a new user meets them: NATS that is not there, and NATS URLs that are not URLs. Each is one line on stderr
(no traceback) that says what is wrong, at once: a refused connection does not wait out the connect timeout, and a bad
URL is not reported as a failed name lookup."""

from __future__ import annotations

import socket
import time

import pytest

from ranksight.core.config import NatsSettings
from ranksight.core.natsconn import NatsUnreachable, connect
from tests.support import run_cli

pytestmark = pytest.mark.chaos


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("command", [["status"], ["agent"], ["alerts", "--follow"]])
def test_a_refused_connection_is_one_line(command: list[str]) -> None:
    url = f"nats://127.0.0.1:{_free_port()},nats://127.0.0.1:{_free_port()}"  # nothing listens on either
    done = run_cli(*command, "--nats", url, timeout=60)
    assert done.returncode == 1 and done.stdout == "", done.stderr
    assert done.stderr.strip().splitlines() == [f"ranksight: cannot connect to NATS at {url}: connection refused "
                                                "(no NATS server listens there)"]  # fmt: skip


async def test_a_refused_connection_fails_at_once() -> None:
    """The long-running components reconnect forever once connected; their first connect does not wait out the
    connect timeout when every server refused it (timed in this process: a child's start is Python's, not ours)."""
    cfg = NatsSettings(
        url=f"nats://127.0.0.1:{_free_port()},nats://127.0.0.1:{_free_port()}", connect_timeout_s=5
    )
    started = time.monotonic()
    with pytest.raises(NatsUnreachable, match="connection refused"):
        await connect(cfg, "refused")
    assert (
        time.monotonic() - started < 2.5
    )  # two refusals and one reconnect wait (0.5 s), not the 5 s timeout


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("notaurl", "NATS URL 'notaurl' has no scheme: expected nats://host:port"),
        ("http://localhost:4222", "NATS URL 'http://localhost:4222' has the scheme http://, not a NATS one"),
        ("nats://:4222", "NATS URL 'nats://:4222' names no host"),
        ("nats://host:99999", "NATS URL 'nats://host:99999' has a bad port"),
        (" , ", "names no server"),
    ],
)
def test_a_bad_url_says_what_is_wrong_with_it(url: str, says: str) -> None:
    done = run_cli("nodes", "--nats", url)
    assert done.returncode == 2, done.stderr  # asked wrongly: a usage error
    (line,) = done.stderr.strip().splitlines()
    assert says in line and "Name or service not known" not in line and "Traceback" not in done.stderr
