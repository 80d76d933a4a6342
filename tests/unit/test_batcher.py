"""The agent's batcher: a kind's buffer leaves when it is full or has waited its delay, the kind's own when its
records came with one (raw Inspector samples wait for the summaries' cadence: one message a second, not four)."""

from __future__ import annotations

import json
import time

from ranksight.agent.batcher import Batcher
from ranksight.agent.publisher import Outgoing
from ranksight.formats.inspector import parse_op
from ranksight.schemas.codec import decode_event
from ranksight.schemas.records import GpuRecord
from ranksight.schemas.subjects import Subjects
from tests.conftest import FIXTURES

RAW = parse_op(
    json.dumps(
        json.loads(
            (
                FIXTURES / "inspector" / "nccl_exporter_readme_v4.0_reducescatter_rank31of32_4nodes.json"
            ).read_text()
        )
    )
)


class Recorder:
    """Stands in for the publisher: keeps what the batcher submits (the publisher's own tests cover the stream)."""

    def __init__(self) -> None:
        self.sent: list[Outgoing] = []

    async def submit(self, msg: Outgoing) -> None:
        self.sent.append(msg)


def kinds(rec: Recorder) -> list[tuple[str, int]]:
    out = []
    for msg in rec.sent:
        env = decode_event(msg.payload)
        out.append((env.kind, len(env.records)))
    return out


async def test_a_kind_with_its_own_delay_waits_for_it_and_others_keep_the_default() -> None:
    rec = Recorder()
    batcher = Batcher(rec, Subjects(), "c", "n", "inc", max_delay_s=0.25)  # type: ignore[arg-type]
    start = time.monotonic()
    await batcher.add("gpu", [GpuRecord(index=0)], ttl=30, durable=False)
    for _ in range(3):
        await batcher.add("inspector", [RAW], ttl=30, durable=True, max_delay_s=1.0)
    await batcher.flush_due(start + 0.6)
    assert kinds(rec) == [("gpu", 1)]
    await batcher.flush_due(start + 1.1)
    assert kinds(rec) == [("gpu", 1), ("inspector", 3)]  # three adds, one message
    await batcher.add("gpu", [GpuRecord(index=1)], ttl=30, durable=False)
    await batcher.flush_due(time.monotonic() + 0.3)
    assert kinds(rec)[-1] == ("gpu", 1)
