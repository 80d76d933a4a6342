"""``heartbeat``: an agent proves it is alive and reports the health of its collectors."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ranksight.schemas.records.base import Record
from ranksight.schemas.records.quantities import Count, Pid, Seconds, TimestampNs

CollectorState = Literal["ok", "error", "absent", "disabled", "starting"]


class CollectorHealth(BaseModel):
    model_config = ConfigDict(extra="ignore")

    name: str
    state: CollectorState
    source: str | None = None
    last_success_ns: TimestampNs | None = None
    last_error: str | None = None
    last_duration_s: Seconds | None = None
    runs: Count = 0
    errors: Count = 0


class PublisherStats(BaseModel):
    model_config = ConfigDict(extra="ignore")

    published: Count = 0
    acked: Count = 0
    retries: Count = 0
    dropped: Count = 0
    pending: Count = 0


class SchedulerJob(BaseModel):
    """A batch job running on the node, as the scheduler's prolog registered it (``deploy/slurm/prolog.sh``)."""

    model_config = ConfigDict(extra="ignore")
    job: str
    user: str | None = None
    nodes: str | None = None  # the scheduler's node list as written, e.g. gpu[001-004]
    started_ns: TimestampNs | None = None


class HeartbeatRecord(Record):
    min_records = 1

    hostname: str
    version: str
    pid: Pid
    started_ns: TimestampNs
    collectors: list[CollectorHealth] = Field(default_factory=list)
    publisher: PublisherStats = PublisherStats()
    jobs: list[SchedulerJob] = Field(default_factory=list)
