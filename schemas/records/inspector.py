"""``inspector``: one Inspector profiler record (a collective or a point-to-point operation of one rank)."""

from __future__ import annotations

from typing import Literal

from schemas.records.base import Record


class InspectorRecord(Record):
    comm_id: str
    comm_name: str | None = None
    rank: int
    n_ranks: int
    nnodes: int | None = None
    hostname: str
    pid: int
    op_kind: Literal["coll", "p2p"]
    op: str
    sn: int
    peer: int | None = None
    msg_size_bytes: int
    exec_time_us: float | None = None
    timing_source: str | None = None
    algobw_gbs: float | None = None
    busbw_gbs: float | None = None
    dump_ts_us: int
