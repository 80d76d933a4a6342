"""``app``: one signal from a training process, sent through the local agent (see :mod:`ranksight.client`).

``event`` says what it is: ``start`` (heartbeats expected from now on), ``heartbeat``, ``section_open``,
``section_close``, ``marker`` or ``end`` (the process finished normally). The agent fills in the timeouts the process
did not choose from its configuration, so the aggregator judges every rank by the timeouts recorded with its facts.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from ranksight.schemas.records.base import Record, RecordKind
from ranksight.schemas.records.quantities import (
    Count,
    Gauge,
    Integer,
    Pid,
    Rank,
    RankCount,
    Seconds,
    TimestampNs,
)

AppEvent = Literal["start", "heartbeat", "section_open", "section_close", "marker", "end"]
FieldValue = str | Integer | Gauge | bool | None


class AppRecord(Record, kw_only=True, frozen=True):
    event: AppEvent
    job_id: str | None = None
    rank: Rank | None = None
    local_rank: Rank | None = None
    world_size: RankCount | None = None
    pid: Pid
    n: Annotated[Count, msgspec.Meta(description="message number of this process, in send order")]
    client_ts: Annotated[TimestampNs, msgspec.Meta(description="the process's clock, ns since the epoch")]
    dropped: Annotated[
        Count, msgspec.Meta(description="messages this process dropped so far (agent absent or slow)")
    ] = 0
    step: Count | None = None
    step_time_s: Annotated[
        Seconds | None, msgspec.Meta(description="mean seconds per step since the previous heartbeat")
    ] = None
    open_sections: Annotated[
        list[Count], msgspec.Meta(description="heartbeat: ids of the sections open when it was sent")
    ] = []
    section: str | None = None
    section_id: Count | None = None
    duration_s: Seconds | None = None
    ok: Annotated[bool | None, msgspec.Meta(description="section_close: false when the block raised")] = None
    timeout_s: Annotated[
        Seconds | None, msgspec.Meta(description="heartbeat timeout (start/heartbeat) or section timeout")
    ] = None
    initial_timeout_s: Annotated[
        Seconds | None, msgspec.Meta(description="start: seconds allowed before the first heartbeat")
    ] = None
    text: str | None = None
    fields: dict[str, FieldValue] = msgspec.field(default_factory=dict)


KINDS = [
    RecordKind("app", AppRecord, collector="app", tracker="app"),
]
