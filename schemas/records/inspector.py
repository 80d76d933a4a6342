"""``inspector``: one Inspector profiler record (a collective or a point-to-point operation of one rank).

The kind carries raw per-operation records. Per-window summaries (design §4: per comm, collective, size and rank,
keeping the statistics the straggler model needs) will be a separate, additive kind (``inspector_summary``), so this
model never has to change shape for them; consumers select on the kind.
"""

from __future__ import annotations

from typing import Literal

from ranksight.schemas.records.base import Record

CaptureModel = Literal["ring", "sampled"]


class InspectorOperation(Record):
    """Who ran an operation: its communicator, the rank in it, the process; shared by raw records and summaries."""

    comm_id: str
    comm_name: str | None = None
    rank: int
    n_ranks: int
    nnodes: int | None = None
    hostname: str
    pid: int
    op_kind: Literal["coll", "p2p"]
    op: str


class InspectorRecord(InspectorOperation):
    sn: int
    peer: int | None = None
    msg_size_bytes: int
    exec_time_us: float | None = None
    timing_source: str | None = None
    algobw_gbs: float | None = None
    busbw_gbs: float | None = None
    dump_ts_us: int
    capture_model: CaptureModel = "sampled"
    busbw_expected_gbs: float | None = None  # recomputed from size and time (design §4)
    bw_mismatch: bool = False  # reported busbw disagrees with the recomputed one (broken build)
