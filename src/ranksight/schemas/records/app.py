"""``app``: one signal from a training process, sent through the local agent (see :mod:`ranksight.client`).

``event`` says what it is: ``start`` (heartbeats expected from now on), ``heartbeat``, ``section_open``,
``section_close``, ``marker`` or ``end`` (the process finished normally). The agent fills in the timeouts the process
did not choose from its configuration, so the aggregator judges every rank by the timeouts recorded with its facts.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ranksight.schemas.records.base import Record
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


class AppRecord(Record):
    event: AppEvent
    job_id: str | None = None
    rank: Rank | None = None
    local_rank: Rank | None = None
    world_size: RankCount | None = None
    pid: Pid
    n: Count = Field(description="message number of this process, in send order")
    client_ts: TimestampNs = Field(description="the process's clock, ns since the epoch")
    dropped: Count = Field(0, description="messages this process dropped so far (agent absent or slow)")
    step: Count | None = None
    step_time_s: Seconds | None = Field(
        None, description="mean seconds per step since the previous heartbeat"
    )
    open_sections: list[Count] = Field([], description="heartbeat: ids of the sections open when it was sent")
    section: str | None = None
    section_id: Count | None = None
    duration_s: Seconds | None = None
    ok: bool | None = Field(None, description="section_close: false when the block raised")
    timeout_s: Seconds | None = Field(
        None, description="heartbeat timeout (start/heartbeat) or section timeout"
    )
    initial_timeout_s: Seconds | None = Field(
        None, description="start: seconds allowed before the first heartbeat"
    )
    text: str | None = None
    fields: dict[str, FieldValue] = Field(default_factory=dict)
