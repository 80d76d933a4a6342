"""``inspector_dump_stats``: one communicator's dump marker of one process, as Inspector v4.1 and later write it.

From output format v4.1 the plugin begins each communicator's dump with a ``dump_stats`` line: how many records the
dump holds, and how many completed operations its rings dropped since the process started (``*_dropped_total``) and
since the previous dump (``*_dropped_since_last_dump``). Drops are what a straggler finding cannot see: a rank whose
ring overflowed has fewer records than its peers, so coverage statements need them. The proxy counters exist only
when the plugin's proxy tracing is on (v4.4); they are None otherwise. v4.4 adds, besides the proxy ring's own
drops, the proxy operations lost for want of a pool slot (``proxy_ops_dropped_*``), the proxy steps overwritten in
the ring (``proxy_steps_overwritten_*``) and the process's proxy operations skipped as PXN
(``proxy_pxn_skipped_process_total``, one counter per process, repeated in each communicator's marker).
"""

from __future__ import annotations

from ranksight.schemas.records.base import Record, RecordKind
from ranksight.schemas.records.quantities import Count, Pid, Rank, RankCount, TimestampUs


class InspectorDumpStatsRecord(Record, kw_only=True, frozen=True):
    comm_id: str
    comm_name: str | None = None
    rank: Rank
    n_ranks: RankCount
    hostname: str
    pid: Pid
    dump_ts_us: TimestampUs
    format_version: str
    coll_records: Count
    coll_dropped_total: Count
    coll_dropped_since_last_dump: Count
    p2p_records: Count
    p2p_dropped_total: Count
    p2p_dropped_since_last_dump: Count
    proxy_records: Count | None = None
    proxy_dropped_total: Count | None = None
    proxy_dropped_since_last_dump: Count | None = None
    proxy_ops_dropped_total: Count | None = None
    proxy_ops_dropped_since_last_dump: Count | None = None
    proxy_steps_overwritten_total: Count | None = None
    proxy_steps_overwritten_since_last_dump: Count | None = None
    proxy_pxn_skipped_process_total: Count | None = None


KINDS = [
    RecordKind(
        "inspector_dump_stats", InspectorDumpStatsRecord, collector="inspector", tracker="inspector_drops"
    ),
]
