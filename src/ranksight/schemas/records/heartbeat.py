"""``heartbeat``: an agent proves it is alive and reports the health of its collectors."""

from __future__ import annotations

from typing import Literal

import msgspec

from ranksight.schemas.records.base import Record, RecordKind, SubRecord
from ranksight.schemas.records.quantities import Count, Pid, Seconds, TimestampNs

CollectorState = Literal["ok", "error", "absent", "disabled", "starting"]


class CollectorHealth(SubRecord, kw_only=True):
    name: str
    state: CollectorState
    source: str | None = None
    last_success_ns: TimestampNs | None = None
    last_error: str | None = None
    last_duration_s: Seconds | None = None
    runs: Count = 0
    errors: Count = 0


class PublisherStats(SubRecord, kw_only=True):
    published: Count = 0
    acked: Count = 0
    retries: Count = 0
    dropped: Count = 0
    pending: Count = 0


class SchedulerJob(SubRecord, kw_only=True):
    """A batch job running on the node, as the scheduler's prolog registered it (``deploy/slurm/prolog.sh``)."""

    job: str
    user: str | None = None
    nodes: str | None = None  # the scheduler's node list as written, e.g. gpu[001-004]
    started_ns: TimestampNs | None = None


class HeartbeatRecord(Record, kw_only=True, frozen=True):
    min_records = 1

    hostname: str
    version: str
    pid: Pid
    started_ns: TimestampNs
    collectors: list[CollectorHealth] = msgspec.field(default_factory=list)
    publisher: PublisherStats = msgspec.field(default_factory=PublisherStats)
    jobs: list[SchedulerJob] = msgspec.field(default_factory=list)


KINDS = [
    RecordKind("heartbeat", HeartbeatRecord, collector="heartbeat", tracker="nodes"),
]
