"""The aggregator's JetStream set-up waits out a cluster that is still electing leaders, and only that."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import nats.errors
import nats.js.errors
import pytest

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
