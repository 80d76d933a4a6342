"""CLI errors never print the credentials of a NATS URL (real nats-server, real CLI process)."""

from __future__ import annotations

from ranksight.core.natsserver import NatsServer
from tests.support import run_cli_async


async def test_cli_error_hides_url_credentials(nats_server: NatsServer) -> None:
    url = nats_server.url.replace("nats://", "nats://alice:s3cret@")
    proc = await run_cli_async("nodes", "--nats", url)  # the server answers; no aggregator does
    assert proc.returncode == 1
    assert "s3cret" not in proc.stderr + proc.stdout
    assert "no aggregator answers on nats://alice:***@127.0.0.1" in proc.stderr
