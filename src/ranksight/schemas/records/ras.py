"""``ras`` (a status poll of a job's RAS service) and ``ras_event`` (one MONITOR event).

:class:`RasStatus` is what the status parsers produce (text or JSON, any NCCL/RCCL version); :class:`RasRecord` is the
same facts plus where they came from (job, endpoint). Hashes are normalized to ``0x`` + lowercase hex without leading
zeros, so the text form (``%016lx``) and the JSON form (``0x%lx``) of one communicator are equal.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

import msgspec

from ranksight.schemas.records.base import Record, RecordKind, SubRecord
from ranksight.schemas.records.quantities import Count, Index, Micros, Pid, Rank, RankCount, Seconds

RasHealth = Literal["ok", "warning", "degraded", "failed"]
RasFormat = Literal["text", "json", "monitor"]


class RasLaggingRank(SubRecord, kw_only=True):
    """A rank whose operation count of a collective is below its peers' highest: it has not entered (or not issued)
    the operations they have. Normal for an instant while a job runs; a hang when it persists."""

    rank: Rank
    host: str
    pid: Pid | None = None
    collective: str
    count: Count
    peers_count: Count


class RasCommunicator(SubRecord, kw_only=True):
    hash: str
    secondary_hash: str | None = None
    size: RankCount | None = None
    status: str | None = None  # RUNNING, INIT, FINALIZE, ABORT, NOCOMM (UNKNOWN before 2.26)
    errors: list[str] = msgspec.field(default_factory=list)  # flags: INCOMPLETE, ERROR, MISMATCH
    missing_ranks: list[Rank] = msgspec.field(default_factory=list)
    ranks_reporting: Count | None = None
    # status -> number of ranks (JSON only)
    rank_status: dict[str, Count] = msgspec.field(default_factory=dict)
    # collective -> highest operation count over the ranks (JSON only)
    op_counts: dict[str, Count] = msgspec.field(default_factory=dict)
    # missing ranks whose process the server cannot name (JSON "host": "unknown", "pid": -1)
    unknown_ranks: list[Rank] = msgspec.field(default_factory=list)
    complete: bool = (
        True  # False: the text elided part of this communicator's facts (e.g. a long missing-rank list)
    )
    # the status lines (or JSON entry) behind its flags
    evidence: list[str] = msgspec.field(default_factory=list)
    # ranks behind a minority of their comm (JSON only)
    lagging_ranks: Annotated[list[RasLaggingRank], msgspec.Meta(max_length=64)] = msgspec.field(
        default_factory=list
    )


class RasProcess(SubRecord, kw_only=True):
    host: str
    pid: Pid | None = None
    gpus: list[Index] = msgspec.field(default_factory=list)
    # communicator hash -> this process's ranks in it
    comms: dict[str, list[Rank]] = msgspec.field(default_factory=dict)
    evidence: list[str] = msgspec.field(default_factory=list)  # the status lines naming this process


class RasMismatch(SubRecord, kw_only=True):
    hash: str
    kind: Literal["status", "op_count"]
    collective: str | None = None  # None for the 2.24 wording ("collective operation counts") and for status


class RasStatus(SubRecord, kw_only=True):
    """One parsed ``STATUS`` reply."""

    format: Literal["text", "json"]
    version: str | None = None
    health: RasHealth
    nodes: Count | None = None
    processes: Count | None = None
    gpus: Count | None = None
    communicators: list[RasCommunicator] = msgspec.field(default_factory=list)
    missing_processes: list[RasProcess] = msgspec.field(default_factory=list)
    dead_processes: list[RasProcess] = msgspec.field(default_factory=list)
    mismatches: list[RasMismatch] = msgspec.field(default_factory=list)
    timeouts: Count = 0
    collection_s: Seconds | None = None
    # False: the format has no job-level INCOMPLETE/DEAD sections (JSON): empty missing/dead lists mean "not said"
    job_sections: bool = True
    # False: only the communicators with a flag are listed (text): an absent one is unflagged, its op counts unknown
    all_communicators: bool = True


# msgspec lets a frozen record extend the unfrozen struct its parser builds; mypy's dataclass rules do not
class RasRecord(Record, RasStatus, kw_only=True, frozen=True):  # type: ignore[misc]
    """A status as published. A status too big for one message (a JSON detail of thousands of communicators) goes out
    in ``parts`` records of one poll (``poll_id``, per agent incarnation), each with the job-level fields and a share
    of the lists (communicators, missing and dead processes, mismatches); the aggregator judges the poll once it
    holds every part."""

    schema_version: ClassVar[int] = 2  # 2: poll_id, part, parts
    job_id: str | None = None
    endpoint: str
    poll_id: Count | None = None
    part: Count = 0  # 0 .. parts - 1; a part outside that range is never assembled
    parts: RankCount = 1


class RasDiagnosticFinding(SubRecord, kw_only=True):
    """One line of a RAS ``DIAGNOSTICS`` reply (what each field holds: :mod:`agent.collectors.ras.parse_diagnostics`).
    ``hosts`` are the hosts the line names (Xid/SXid) or, resolved by the agent from a JSON status, those of the
    ranks in ``ranks``."""

    tag: Literal["ok", "info"]
    check: str
    kind: str
    text: str
    comm: str | None = None
    ranks: list[Rank] = msgspec.field(default_factory=list)
    ranks_total: Count = 0
    reference_rank: Rank | None = None
    reference_value: str | None = None
    hosts: list[str] = msgspec.field(default_factory=list)


class RasDiagnostics(SubRecord, kw_only=True):
    """One ``DIAGNOSTICS`` reply: ``ok`` (ran to completion), ``incomplete`` (ended without its completion line),
    ``busy`` (another run was in progress), ``unsupported`` (a server before NCCL 2.31), ``error``."""

    status: Literal["ok", "incomplete", "busy", "unsupported", "error"]
    message: str | None = None
    host: str | None = None  # the process that answered
    pid: Pid | None = None
    scope: Literal["job", "comm"] | None = None
    completed_ms: Micros | None = None  # milliseconds, bounded as any duration
    peers: Count | None = None
    findings: Annotated[list[RasDiagnosticFinding], msgspec.Meta(max_length=100_000)] = msgspec.field(
        default_factory=list
    )


class RasDiagnosticsRecord(Record, RasDiagnostics, kw_only=True, frozen=True):  # type: ignore[misc]
    job_id: str | None = None
    endpoint: str


class RasEvent(SubRecord, kw_only=True):
    """One MONITOR event (text line or JSON object)."""

    time: str | None = None
    event_group: str | None = None  # LIFECYCLE, TRACE (JSON only); RANKSIGHT for ENDPOINT_CLOSED
    event: str
    host: str | None = None
    pid: Pid | None = None
    gpus: list[Index] = msgspec.field(default_factory=list)
    # NVML numbers: text `` (NVML n)`` (printed when they differ from the CUDA numbers, else equal to ``gpus``), JSON
    # ``nvml_devs``
    nvml_gpus: list[Index] = msgspec.field(default_factory=list)
    addr: str | None = None  # a peer the server cannot name: its address, e.g. ``10.9.9.9<1234>``
    details: str = ""


class RasEventRecord(Record, RasEvent, kw_only=True, frozen=True):  # type: ignore[misc]
    job_id: str | None = None
    endpoint: str


KINDS = [
    RecordKind("ras", RasRecord, collector="ras", tracker="jobs", parse="ranksight.agent.collectors.ras.cli"),
    RecordKind(
        "ras_event",
        RasEventRecord,
        collector="ras",
        tracker="jobs",
        parse="ranksight.agent.collectors.ras.cli",
    ),
    RecordKind("ras_diagnostics", RasDiagnosticsRecord, collector="ras", tracker="jobs"),
]
