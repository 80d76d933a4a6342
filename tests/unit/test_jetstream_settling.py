"""The aggregator's JetStream set-up waits out a cluster that is still electing leaders, and only that."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import nats.errors
import nats.js.errors
import pytest
from nats.js.api import ConsumerConfig

from ranksight.aggregator.runtime import ensure_consumer
from ranksight.core.natsconn import once_jetstream_answers


def answering(
    *failures: Exception, forever: Exception | None = None
) -> tuple[Callable[[], Awaitable[str]], list[int]]:
    """A JetStream call that raises ``failures`` in turn (then ``forever`` on every try, if given), else answers; and
    the count of its tries."""
    pending, tries = list(failures), [0]

    async def call() -> str:
        tries[0] += 1
        if pending:
            raise pending.pop(0)
        if forever is not None:
            raise forever
        return "made"

    return call, tries


async def test_no_answer_is_tried_again_until_jetstream_answers() -> None:
    call, tries = answering(
        nats.errors.TimeoutError(),
        nats.errors.NoRespondersError(),
        nats.js.errors.ServiceUnavailableError(
            code=503, description="JetStream system temporarily unavailable"
        ),
        nats.js.errors.NoStreamResponseError(),
    )
    assert await once_jetstream_answers(call, "stream", timeout_s=10) == "made"
    assert tries == [5]


async def test_a_refusal_is_raised_at_once() -> None:
    call, tries = answering(
        forever=nats.js.errors.BadRequestError(code=400, description="stream name already in use")
    )
    with pytest.raises(nats.js.errors.BadRequestError):
        await once_jetstream_answers(call, "stream", timeout_s=10)
    assert tries == [1]


async def test_the_last_no_answer_is_raised_when_time_is_up() -> None:
    call, tries = answering(forever=nats.errors.TimeoutError())
    with pytest.raises(nats.errors.TimeoutError):
        await once_jetstream_answers(call, "stream", timeout_s=0.5)
    assert 2 <= tries[0] <= 4


class ConsumerApi:
    """The two JetStream calls :func:`ensure_consumer` makes: no consumer yet, and ``add_consumer`` answering as
    :func:`answering`'s call does."""

    def __init__(self, add: Callable[[], Awaitable[str]]) -> None:
        self.add = add
        self.added: list[tuple[str, str | None]] = []

    async def consumer_info(self, stream: str, durable: str) -> None:
        raise nats.js.errors.NotFoundError(code=404, description="consumer not found")

    async def add_consumer(self, stream: str, config: ConsumerConfig) -> None:
        await self.add()
        self.added.append((stream, config.durable_name))


async def test_ingest_waits_for_its_consumer_while_the_stream_leader_is_elected() -> None:
    add, tries = answering(nats.errors.TimeoutError(), nats.errors.TimeoutError())
    js = ConsumerApi(add)
    await ensure_consumer(js, "EVENTS", ConsumerConfig(durable_name="aggregator"), timeout_s=10)  # type: ignore[arg-type]
    assert tries == [3] and js.added == [("EVENTS", "aggregator")]
