"""The aggregator's JetStream set-up waits out a cluster that is still electing leaders, and only that."""

from __future__ import annotations

import nats.errors
import nats.js.errors
import pytest

from ranksight.core.natsconn import once_jetstream_answers


async def test_no_answer_is_tried_again_until_jetstream_answers() -> None:
    failures = [nats.errors.TimeoutError(), nats.errors.NoRespondersError(),
                nats.js.errors.ServiceUnavailableError(code=503, description="JetStream system temporarily unavailable")]  # fmt: skip
    tries = 0

    async def create() -> str:
        nonlocal tries
        tries += 1
        if failures:
            raise failures.pop(0)
        return "made"

    assert await once_jetstream_answers(create, "stream", timeout_s=10) == "made"
    assert tries == 4


async def test_a_refusal_is_raised_at_once() -> None:
    tries = 0

    async def create() -> None:
        nonlocal tries
        tries += 1
        raise nats.js.errors.BadRequestError(code=400, description="stream name already in use")

    with pytest.raises(nats.js.errors.BadRequestError):
        await once_jetstream_answers(create, "stream", timeout_s=10)
    assert tries == 1


async def test_the_last_no_answer_is_raised_when_time_is_up() -> None:
    tries = 0

    async def create() -> None:
        nonlocal tries
        tries += 1
        raise nats.errors.TimeoutError

    with pytest.raises(nats.errors.TimeoutError):
        await once_jetstream_answers(create, "stream", timeout_s=0.5)
    assert 2 <= tries <= 4
