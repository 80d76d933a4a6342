"""What agents before ``inspector_summary`` schema version 2 published, kept as a fixture of behaviour: what an aggregator
of this version must still read from them.

Those agents closed each window of dump time ``grace_s`` after its end and published it once (``part_us`` 0), per
(comm, collective, size bucket, process); a record they read after its window had closed was counted in ``late`` of
the key's next summary and summarized nowhere. Built on this version's summarizer (a window's records taken at once
are the whole window in one part), so the aggregates come from the same code.
"""

from __future__ import annotations

from collections import defaultdict

from msgspec.structs import replace

from ranksight.agent.collectors.inspector.summary import Summarizer
from ranksight.schemas.records import InspectorRecord, InspectorSummaryRecord
from ranksight.schemas.wire import size_bucket

Key = tuple[str, str, str, int, int, str, int]


def _key(x: InspectorRecord | InspectorSummaryRecord) -> Key:
    size = x.size_bucket if isinstance(x, InspectorSummaryRecord) else size_bucket(x.msg_size_bytes)
    return x.comm_id, x.op_kind, x.op, size, x.rank, x.hostname, x.pid


def whole_windows(
    records: list[InspectorRecord],
    window_s: float = 5.0,
    slice_s: float = 0.5,
    grace_s: float = 2.0,
    read_after_us: dict[str, int] | None = None,
) -> list[tuple[int, InspectorSummaryRecord]]:
    """The summaries of these records (in dump-time order) with the time (µs) each was published, in that order; the
    agent of a host in ``read_after_us`` reads its records that long after their dump time (a starved host)."""
    window_us, grace_us = round(window_s * 1e6), round(grace_s * 1e6)
    by_window: dict[str, dict[int, list[InspectorRecord]]] = defaultdict(lambda: defaultdict(list))
    for rec in records:
        by_window[rec.hostname][rec.dump_ts_us - rec.dump_ts_us % window_us].append(rec)
    out: list[tuple[int, InspectorSummaryRecord]] = []
    for host, windows in by_window.items():
        delay = (read_after_us or {}).get(host, 0)
        late: dict[Key, int] = defaultdict(int)  # read after their window closed: in the key's next summary
        for start in sorted(windows):
            published = start + window_us + grace_us
            summarizer, missed = Summarizer(window_s, slice_s), []
            for rec in windows[start]:
                if rec.dump_ts_us + delay > published:
                    missed.append(_key(rec))
                else:
                    summarizer.add(rec)
            for x in summarizer.take():
                out.append((published, replace(x, **{"part_us": 0, "late": late.pop(_key(x), 0)})))
            for key in missed:
                late[key] += 1
    out.sort(key=lambda x: x[0])
    return out
