"""``inspector_dump_stats``: one communicator's dump marker of one process, as Inspector v4.1 and later write it.

From output format v4.1 the plugin begins each communicator's dump with a ``dump_stats`` line: how many records the
dump holds, and how many completed operations its rings dropped since the process started (``*_dropped_total``) and
since the previous dump (``*_dropped_since_last_dump``). Drops are what a straggler finding cannot see: a rank whose
ring overflowed has fewer records than its peers, so coverage statements need them. The proxy counters exist only
when the plugin's proxy tracing is on (v4.4); they are None otherwise.
"""

from __future__ import annotations

from ranksight.schemas.records.base import Record


class InspectorDumpStatsRecord(Record):
    comm_id: str
    comm_name: str | None = None
    rank: int
    n_ranks: int
    hostname: str
    pid: int
    dump_ts_us: int
    format_version: str
    coll_records: int
    coll_dropped_total: int
    coll_dropped_since_last_dump: int
    p2p_records: int
    p2p_dropped_total: int
    p2p_dropped_since_last_dump: int
    proxy_records: int | None = None
    proxy_dropped_total: int | None = None
    proxy_dropped_since_last_dump: int | None = None
    proxy_ops_dropped_total: int | None = None
    proxy_ops_dropped_since_last_dump: int | None = None
