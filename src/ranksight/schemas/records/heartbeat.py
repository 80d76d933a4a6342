"""``heartbeat``: an agent proves it is alive and reports the health of its collectors."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ranksight.schemas.records.base import Record

CollectorState = Literal["ok", "error", "absent", "disabled", "starting"]


class CollectorHealth(BaseModel):
    model_config = ConfigDict(extra="ignore")

    name: str
    state: CollectorState
    source: str | None = None
    last_success_ns: int | None = None
    last_error: str | None = None
    last_duration_s: float | None = None
    runs: int = 0
    errors: int = 0


class PublisherStats(BaseModel):
    model_config = ConfigDict(extra="ignore")

    published: int = 0
    acked: int = 0
    retries: int = 0
    dropped: int = 0
    pending: int = 0


class SchedulerJob(BaseModel):
    """A batch job running on the node, as the scheduler's prolog registered it (``deploy/slurm/prolog.sh``)."""

    model_config = ConfigDict(extra="ignore")
    job: str
    user: str | None = None
    nodes: str | None = None  # the scheduler's node list as written, e.g. gpu[001-004]
    started_ns: int | None = None


class HeartbeatRecord(Record):
    min_records = 1

    hostname: str
    version: str
    pid: int
    started_ns: int
    collectors: list[CollectorHealth] = Field(default_factory=list)
    publisher: PublisherStats = PublisherStats()
    jobs: list[SchedulerJob] = Field(default_factory=list)
