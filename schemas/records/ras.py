"""``ras`` (a status poll of a job's RAS service) and ``ras_event`` (one MONITOR event)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from schemas.records.base import Record

RasHealth = Literal["ok", "warning", "degraded", "failed"]


class RasCommunicator(BaseModel):
    model_config = ConfigDict(extra="ignore")

    hash: str
    size: int | None = None
    status: str | None = None
    errors: list[str] = []
    missing_ranks: list[int] = []


class RasProcess(BaseModel):
    model_config = ConfigDict(extra="ignore")

    host: str
    pid: int | None = None
    gpus: list[int] = []


class RasRecord(Record):
    job_id: str | None = None
    endpoint: str
    format: Literal["text", "json"]
    version: str | None = None
    health: RasHealth
    nodes: int | None = None
    processes: int | None = None
    gpus: int | None = None
    communicators: list[RasCommunicator] = []
    missing_processes: list[RasProcess] = []
    dead_processes: list[RasProcess] = []
    timeouts: int = 0


class RasEventRecord(Record):
    job_id: str | None = None
    endpoint: str
    time: str | None = None
    event: str
    host: str | None = None
    pid: int | None = None
    details: str = ""
