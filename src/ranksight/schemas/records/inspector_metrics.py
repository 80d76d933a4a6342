"""``inspector_metrics``: Inspector data that comes without dump files, as the plugin's Prometheus textfile output
(NCCL 2.29.3 and later: ``NCCL_INSPECTOR_PROM_DUMP``, one ``.prom`` file per GPU) or its OTLP/HTTP JSON export
(2.32.3: ``NCCL_INSPECTOR_OTEL_EXPORT``, posted to the agent's loopback receiver) print it.

One record is one GPU's view of one bucket, or one operation, or the GPU's totals:

- ``bucket``: per communicator name, collective or p2p operation, message-size range (``size_range``, e.g.
  ``4-5GB``; ``size_lo_bytes`` its lower bound) and, for collectives, ``algo_proto``, over one dump interval: the
  mean exec time and the geometric-mean bus bandwidth (Prometheus textfile, default OTLP mode).
- ``op``: one operation (OTLP verbose mode; the 2.29.x textfile, with its rank and a rounded size): its communicator
  id, sequence number, exact size, peer (p2p), exec time and both bandwidths. The plugin does not say the rank or the process; where the agent can tell both (the
  posting process, and its launcher's rank in a communicator as large as the job, or a one-rank communicator), it
  publishes the operation as the ``inspector`` record and summary a dump file would give instead, so it joins the
  per-rank straggler analysis. The operations left here are history and evidence.
- ``device``: the GPU's cumulative ring counters: operations recorded and dropped, per collective and p2p (the
  Prometheus stats option, OTLP verbose mode).

``job_id`` is the plugin's ``slurm_job_id`` label or the OTLP resource attribute ``slurm.job.id`` (None when it says
``unknown``); ``source`` says which form it came in. ``pid`` is the process that posted an OTLP export, where the agent
found it (a textfile names no process): a ``device`` record with it is that process's drop counters, which a
straggler finding about the process cites in its coverage.
"""

from __future__ import annotations

from typing import Literal

from ranksight.schemas.records.base import Record, RecordKind
from ranksight.schemas.records.quantities import (
    Bytes,
    Count,
    Gauge,
    Micros,
    Pid,
    Rank,
    RankCount,
    TimestampUs,
)

InspectorMetricsSource = Literal["prom", "otlp"]
InspectorMetricsShape = Literal["bucket", "op", "device"]


class InspectorMetricsRecord(Record, kw_only=True, frozen=True):
    source: InspectorMetricsSource
    shape: InspectorMetricsShape
    format_version: str | None = None  # the plugin's ``version`` label, e.g. v5.1
    job_id: str | None = None
    hostname: str
    gpu: str  # the plugin's name of the GPU: ``GPU<cuda device>``
    pid: Pid | None = None  # the posting process (OTLP, where the agent found it)
    rank: Rank | None = None  # op: its rank in the communicator (the 2.29.x textfile's per-operation labels)
    ts_us: TimestampUs | None = (
        None  # the point's time (OTLP); a textfile says none (its file's mtime is not the data's)
    )
    comm_name: str | None = None
    comm_id: str | None = None  # OTLP verbose only
    n_nodes: RankCount | None = None
    n_ranks: RankCount | None = None
    op_kind: Literal["coll", "p2p"] | None = None
    op: str | None = None
    algo_proto: str | None = None
    size_range: str | None = None
    size_lo_bytes: Bytes | None = None
    msg_size_bytes: Bytes | None = None  # OTLP verbose only
    sn: Count | None = None  # OTLP verbose only
    peer: Rank | None = None  # OTLP verbose p2p only
    exec_time_us: Micros | None = None  # bucket: the mean
    busbw_gbs: Gauge | None = None  # bucket: the geometric mean
    algobw_gbs: Gauge | None = None  # OTLP verbose only
    coll_total: Count | None = None  # device: counters since the process started
    coll_dropped_total: Count | None = None
    p2p_total: Count | None = None
    p2p_dropped_total: Count | None = None


KINDS = [
    RecordKind("inspector_metrics", InspectorMetricsRecord, collector="inspector", tracker="inspector_drops"),
]
