"""A message over the server's max_payload can never be sent: the publisher says so, counts it and goes on, instead of
retrying it forever in front of everything else (a 1024-node job's RAS status is one record of megabytes)."""

from __future__ import annotations

import asyncio

import nats
import pytest
from nats.js.api import StreamConfig

from ranksight.agent.publisher import Outgoing, Publisher
from ranksight.core.natsserver import NatsServer


async def test_an_oversize_message_is_dropped_loudly_and_the_rest_go_on(
    nats_server: NatsServer, caplog: pytest.LogCaptureFixture
) -> None:
    nc = await nats.connect(nats_server.url)
    js = nc.jetstream()
    await js.add_stream(StreamConfig(name="T", subjects=["t.>"]))
    publisher = Publisher(js, ack_timeout_s=2.0)
    runner = asyncio.create_task(publisher.run())
    passed: list[str] = []
    try:
        huge = b"x" * (nc.max_payload + 1)
        await publisher.submit(
            Outgoing("t.big", huge, "m1", durable=True, on_ack=[lambda: passed.append("big")])
        )
        await publisher.submit(
            Outgoing("t.small", b"ok", "m2", durable=True, on_ack=[lambda: passed.append("ok")])
        )
        assert await publisher.flush(10.0)
        assert sorted(passed) == ["big", "ok"]  # the durable source moves past what can never be sent
        assert publisher.stats.dropped == 1 and publisher.stats.acked == 1 and publisher.stats.retries == 0
        assert publisher.stats.published == 1  # the oversize one never left
        assert "over the NATS server's max_payload" in caplog.text
        assert (await js.stream_info("T")).state.messages == 1
    finally:
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
        await nc.close()
