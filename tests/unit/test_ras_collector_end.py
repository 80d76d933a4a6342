"""The RAS collector's report of a job's end is ordered after every status of that job, so the aggregator (which takes
a status stamped after the end for a new cycle of the job) never revives a job that ended: statuses still queued leave
before ``ENDPOINT_CLOSED``, and a poll the end overtook is dropped."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import msgspec
import pytest

import ranksight.agent.collectors.ras.collector as ras_collector
from ranksight.agent.batcher import Batcher
from ranksight.agent.collectors.ras.collector import ENDPOINT_CLOSED, RasCollector
from ranksight.agent.collectors.ras.parse_text import parse_status_text
from ranksight.schemas.codec import decode_event
from ranksight.schemas.records import RasRecord
from ranksight.schemas.records.ras import RasEvent, RasStatus
from ranksight.schemas.subjects import Subjects
from ranksight.settings import Settings
from tests.conftest import FIXTURES
from tests.ras_support import fake_proc
from tests.unit.test_batcher import Recorder

STATUS = parse_status_text((FIXTURES / "ras/upstream-server/ref_2.28.9_text_healthy.txt").read_bytes())


class AlwaysHeld:
    """The lease when this agent is the job's only poller (the lease's own tests cover the KV)."""

    revision = 1

    async def hold(self, job: str) -> bool:
        return True

    async def release(self) -> None:
        return None


def collector(tmp_path: Path) -> tuple[RasCollector, Recorder]:
    settings = Settings().agent.collectors.ras
    settings = settings.model_copy(
        update={"proc_root": fake_proc(tmp_path / "proc", 28028, {"SLURM_JOB_ID": "5"})}
    )
    sent = Recorder()
    batcher = Batcher(sent, Subjects(), "c", "n", "inc", max_delay_s=60.0)  # type: ignore[arg-type]
    ctx: Any = SimpleNamespace(nc=SimpleNamespace(jetstream=lambda: None), node="n", incarnation="inc",
                               settings=Settings(), add_command=lambda *_: None, batcher=batcher)  # fmt: skip
    ras = RasCollector(ctx, settings)
    ras.lease = AlwaysHeld()  # type: ignore[assignment]
    return ras, sent


def published(sent: Recorder) -> list[tuple[int, int, str]]:
    """(seq, ts, what) per message, in the order submitted."""
    out = []
    for msg in sent.sent:
        env = decode_event(msg.payload)
        for rec in env.records:
            what = rec.event if env.kind == "ras_event" else "status"
            out.append((env.seq, env.ts, what))
    return out


async def test_statuses_queued_before_the_end_leave_before_it(tmp_path: Path) -> None:
    ras, sent = collector(tmp_path)
    ras.job_id = ras._identify()
    # a MONITOR event came first, so the event kind's buffer precedes the status kind's in the batcher
    await ras._publish_events([RasEvent(event="PROCESS_START")])
    await ras.ctx.batcher.flush()
    await ras.ctx.batcher.add(
        "ras", [RasRecord(job_id=ras.job_id, endpoint="e", **msgspec.structs.asdict(STATUS))], 30.0, True
    )
    await ras._job_gone()
    await ras.ctx.batcher.flush_due(float("inf"))
    order = published(sent)
    assert [what for *_, what in order] == ["PROCESS_START", "status", ENDPOINT_CLOSED]
    assert order == sorted(order)  # sequence numbers and envelope times rise in that order


async def test_a_poll_that_the_end_overtook_is_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ras, sent = collector(tmp_path)
    ras.job_id = ras._identify()

    async def answered_as_the_endpoint_closed(*_: Any, **__: Any) -> RasStatus:
        await ras._job_gone()  # the MONITOR loop saw EOF while this poll's reply was read
        return STATUS

    monkeypatch.setattr(ras_collector, "poll_status", answered_as_the_endpoint_closed)
    assert await ras.poll_once() is None
    assert ras.job_id is None and ras.last_status is None  # not revived by the late reply
    assert [what for *_, what in published(sent)] == [ENDPOINT_CLOSED]
    monkeypatch.setattr(ras_collector, "poll_status", lambda *_, **__: _answer())
    assert await ras.poll_once() == STATUS  # the next poll: a new cycle, reported
    assert ras.job_id == "slurm-5"


async def _answer() -> RasStatus:
    return STATUS
