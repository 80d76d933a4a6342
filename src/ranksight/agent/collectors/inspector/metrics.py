"""Pure parsers of the Inspector plugin's metric outputs: its Prometheus textfiles and its OTLP/HTTP JSON export,
bytes in, :class:`~schemas.records.InspectorMetricsRecord` out (what each record shape means is in that module).

Both forms come from the same per-GPU aggregation in the plugin (NVIDIA/nccl ``plugins/profiler/inspector``,
``inspector_prom.cc`` from 2.30 and ``inspector_otel.cc`` from 2.32.3):

- metric names: ``nccl_bus_bandwidth_gbs`` and ``nccl_collective_exec_time_microseconds`` (collectives),
  ``nccl_p2p_bus_bandwidth_gbs`` and ``nccl_p2p_exec_time_microseconds`` (p2p), in verbose OTLP also
  ``nccl_collective_algobw_gbs`` / ``nccl_p2p_algobw_gbs``; the device counters ``nccl_collectives_total``,
  ``nccl_collectives_dropped_total``, ``nccl_p2p_total``, ``nccl_p2p_dropped_total``.
- labels: ``version``, ``slurm_job_id`` (textfile only), ``node``, ``gpu``, ``comm_name``, ``n_nodes``, ``nranks``,
  ``collective`` + ``algo_proto`` or ``p2p_operation``, ``message_size`` (a range); verbose OTLP has ``comm_id``,
  ``coll_sn``/``p2p_sn``, ``p2p_peer`` and the exact ``coll_msg_size_bytes``/``p2p_msg_size_bytes`` instead of
  the range. A textfile may also carry labels the plugin does not write (RCCL's docs show ``cluster``) and ``#``
  comment lines: both are ignored.

The textfile of 2.29.3 - 2.29.7 (``ext-profiler/inspector/inspector_prom.cc`` at v2.29.3-1, the same at v2.29.7-1)
is per operation instead, one communicator's latest sampled operation per dump: ``nccl_algorithm_bandwidth_gbs``,
``nccl_bus_bandwidth_gbs`` and ``nccl_collective_exec_time_microseconds`` labelled ``comm_id``, ``hostname``,
``rank``, ``slurm_job``, ``slurm_job_id``, ``nranks``, ``n_nodes``, ``gpu_device_id``, ``collective``, ``coll_sn``,
``timestamp`` (the write time, UTC, to the second) and ``message_size`` (rounded: ``2.00GB``, ``512B``); it has no
``version`` label. Each becomes an ``op`` record with its rank and communicator id (no process: it stays a metrics
record).

The metrics of one label set (a bucket, an operation, a device) become one record. The plugin prints label values
unescaped (``%s``); standard Prometheus escapes (``\\"``, ``\\\\``, ``\\n``) are undone where present.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

import msgspec

from ranksight.errors import ParseError
from ranksight.formats.inspector import busbw_check
from ranksight.schemas.records import InspectorMetricsRecord, InspectorRecord


class InspectorMetricsError(ParseError):
    """Input that is not the plugin's metrics output; the message says why."""


# metric name -> (record shape, op kind, the record field its value goes to)
_METRICS: dict[str, tuple[str, str | None, str]] = {
    "nccl_bus_bandwidth_gbs": ("bucket", "coll", "busbw_gbs"),
    "nccl_collective_exec_time_microseconds": ("bucket", "coll", "exec_time_us"),
    "nccl_collective_algobw_gbs": ("bucket", "coll", "algobw_gbs"),
    "nccl_algorithm_bandwidth_gbs": ("bucket", "coll", "algobw_gbs"),  # the 2.29.x textfile
    "nccl_p2p_bus_bandwidth_gbs": ("bucket", "p2p", "busbw_gbs"),
    "nccl_p2p_exec_time_microseconds": ("bucket", "p2p", "exec_time_us"),
    "nccl_p2p_algobw_gbs": ("bucket", "p2p", "algobw_gbs"),
    "nccl_collectives_total": ("device", None, "coll_total"),
    "nccl_collectives_dropped_total": ("device", None, "coll_dropped_total"),
    "nccl_p2p_total": ("device", None, "p2p_total"),
    "nccl_p2p_dropped_total": ("device", None, "p2p_dropped_total"),
}
_COUNTERS = frozenset({"coll_total", "coll_dropped_total", "p2p_total", "p2p_dropped_total"})
_UNITS = {"B": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40}
_RANGE = re.compile(r"^(\d+)-\d+(B|KB|MB|GB|TB)$")
_PROM_LINE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)\{(.*)\}\s+(\S+)(?:\s+\d+)?$")
_PROM_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"(?:,|$)')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}
MAX_LABEL_CHARS = 1024  # the plugin's label buffer: a longer value is not its output


def size_lower_bound(size_range: str) -> int | None:
    """The lower bound in bytes of the plugin's ``message_size`` range label (``4-5GB`` -> 4 GiB; ``0B`` -> 0)."""
    if size_range == "0B":
        return 0
    match = _RANGE.match(size_range)
    return int(match[1]) * _UNITS[match[2]] if match else None


def _job(value: str | None) -> str | None:
    return None if value in (None, "", "unknown") else value


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _utc_us(text: str | None) -> int | None:
    """The 2.29.x textfile's ``timestamp`` label (``2025-10-17T03:31:47Z``) in microseconds (None: not one)."""
    if text is None:
        return None
    try:
        return int(datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()) * 1_000_000
    except ValueError:
        return None


def _record(source: str, labels: dict[str, str], values: dict[str, float], job_id: str | None,
            ts_us: int | None) -> InspectorMetricsRecord:  # fmt: skip
    shape = "device" if "collective" not in labels and "p2p_operation" not in labels else "bucket"
    op_kind = "coll" if "collective" in labels else "p2p" if "p2p_operation" in labels else None
    sn = labels.get("coll_sn", labels.get("p2p_sn"))
    if shape == "bucket" and sn is not None:
        shape = "op"
    size = labels.get("message_size")
    exact = labels.get("coll_msg_size_bytes", labels.get("p2p_msg_size_bytes"))
    counters: dict[str, Any] = {k: int(v) for k, v in values.items() if k in _COUNTERS and 0 <= v < 2**63}
    gauges: dict[str, Any] = {k: v for k, v in values.items() if k not in _COUNTERS and math.isfinite(v)}
    return InspectorMetricsRecord(
        source=source,  # type: ignore[arg-type]
        shape=shape,  # type: ignore[arg-type]
        format_version=labels.get("version"),
        job_id=job_id,
        hostname=labels.get("node", labels.get("hostname", "unknown")),
        gpu=labels.get("gpu", labels.get("gpu_device_id", "unknown")),
        rank=_int(labels.get("rank")),
        ts_us=ts_us if ts_us is not None else _utc_us(labels.get("timestamp")),
        comm_name=labels.get("comm_name"),
        comm_id=labels.get("comm_id"),
        n_nodes=_int(labels.get("n_nodes")),
        n_ranks=_int(labels.get("nranks")),
        op_kind=op_kind,  # type: ignore[arg-type]
        op=labels.get("collective", labels.get("p2p_operation")),
        algo_proto=labels.get("algo_proto"),
        size_range=size,
        size_lo_bytes=size_lower_bound(size) if size is not None else None,
        msg_size_bytes=_int(exact),
        sn=_int(sn),
        peer=_int(labels.get("p2p_peer")),
        **gauges,
        **counters,
    )


# -- Prometheus textfile ---------------------------------------------------------------------------------------------
def _prom_labels(text: str) -> dict[str, str]:
    labels, at = {}, 0
    while at < len(text):
        match = _PROM_LABEL.match(text, at)
        if match is None:
            raise InspectorMetricsError(f"bad label set at {text[at : at + 40]!r}")
        value = re.sub(r"\\[\\\"n]", lambda m: _UNESCAPE[m[0]], match[2])
        if len(value) > MAX_LABEL_CHARS:
            raise InspectorMetricsError(f"label {match[1]} longer than {MAX_LABEL_CHARS} characters")
        labels[match[1]] = value
        at = match.end()
    return labels


def parse_prom(data: bytes) -> tuple[list[InspectorMetricsRecord], list[str]]:
    """One ``.prom`` file: its records (one per label set) and the lines that are not the plugin's (why each)."""
    groups: dict[tuple[tuple[str, str], ...], dict[str, float]] = {}
    errors: list[str] = []
    for number, raw in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _PROM_LINE.match(line)
        if match is None:
            errors.append(f"line {number}: not a sample")
            continue
        name, label_text, value_text = match.groups()
        known = _METRICS.get(name)
        if known is None:
            errors.append(f"line {number}: unknown metric {name}")
            continue
        try:
            labels, value = _prom_labels(label_text), float(value_text)
        except (InspectorMetricsError, ValueError) as exc:
            errors.append(f"line {number}: {exc}")
            continue
        labels.pop("cluster", None)
        groups.setdefault(tuple(labels.items()), {})[known[2]] = value
    records = [_record("prom", dict(key), values, _job(dict(key).get("slurm_job_id")), None)
               for key, values in groups.items()]  # fmt: skip
    return records, errors


# -- OTLP/HTTP JSON --------------------------------------------------------------------------------------------------
class _AnyValue(msgspec.Struct, gc=False):
    stringValue: str | None = None
    intValue: int | str | None = None
    doubleValue: float | None = None
    boolValue: bool | None = None

    def text(self) -> str | None:
        for value in (self.stringValue, self.intValue, self.doubleValue, self.boolValue):
            if value is not None:
                return str(value)
        return None


class _KeyValue(msgspec.Struct, gc=False):
    key: str
    value: _AnyValue = msgspec.field(default_factory=_AnyValue)


class _Point(msgspec.Struct, gc=False):
    attributes: list[_KeyValue] = []
    timeUnixNano: int | str | None = None
    asDouble: float | str | None = None  # the protobuf JSON mapping writes NaN and infinities as strings
    asInt: int | str | None = None


class _Gauge(msgspec.Struct, gc=False):
    dataPoints: list[_Point] = []


class _Metric(msgspec.Struct, gc=False):
    name: str
    gauge: _Gauge | None = None
    sum: _Gauge | None = None  # a counter, should a later plugin send its totals as OTLP sums


class _Scope(msgspec.Struct, gc=False):
    metrics: list[_Metric] = []


class _Resource(msgspec.Struct, gc=False):
    attributes: list[_KeyValue] = []


class _ResourceMetrics(msgspec.Struct, gc=False):
    resource: _Resource = msgspec.field(default_factory=_Resource)
    scopeMetrics: list[_Scope] = []


class _Request(msgspec.Struct, gc=False):
    resourceMetrics: list[_ResourceMetrics] = []


_OTLP = msgspec.json.Decoder(_Request)
JOB_ATTRIBUTES = ("slurm.job.id",)  # resource attributes naming the job, in order of preference


def _attrs(items: Iterable[_KeyValue]) -> dict[str, str]:
    out = {}
    for kv in items:
        text = kv.value.text()
        if text is not None:
            if len(text) > MAX_LABEL_CHARS:
                raise InspectorMetricsError(f"attribute {kv.key} longer than {MAX_LABEL_CHARS} characters")
            out[kv.key] = text
    return out


def _number(value: Any) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def parse_otlp(body: bytes) -> tuple[list[InspectorMetricsRecord], dict[str, str], list[str]]:
    """One OTLP/HTTP JSON ``ExportMetricsServiceRequest``: its records (one per label set), the resource attributes
    of its first resource, and what was skipped (why each). :class:`InspectorMetricsError` when it is not one."""
    try:
        request = _OTLP.decode(body)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise InspectorMetricsError(f"not an OTLP JSON metrics request: {exc}") from None
    records: list[InspectorMetricsRecord] = []
    resources: dict[str, str] = {}
    skipped: list[str] = []
    for rm in request.resourceMetrics:
        resource = _attrs(rm.resource.attributes)
        resources = resources or resource
        job = _job(next((resource[k] for k in JOB_ATTRIBUTES if k in resource), None))
        groups: dict[tuple[tuple[str, str], ...], tuple[dict[str, float], int | None]] = {}
        for scope in rm.scopeMetrics:
            for metric in scope.metrics:
                known = _METRICS.get(metric.name)
                points = (metric.gauge or metric.sum or _Gauge()).dataPoints
                if known is None:
                    skipped.append(f"unknown metric {metric.name} ({len(points)} points)")
                    continue
                for point in points:
                    value = _number(point.asDouble if point.asDouble is not None else point.asInt)
                    ns = _int(str(point.timeUnixNano)) if point.timeUnixNano is not None else None
                    if value is None:
                        skipped.append(f"{metric.name}: a point without a value")
                        continue
                    key = tuple(_attrs(point.attributes).items())
                    values, ts = groups.setdefault(key, ({}, None))
                    values[known[2]] = value
                    if ns is not None and (ts is None or ns // 1000 > ts):
                        groups[key] = (values, ns // 1000)
        records += [_record("otlp", dict(key), values, job, ts) for key, (values, ts) in groups.items()]
    return records, resources, skipped


# -- verbose OTLP operations as dump records -------------------------------------------------------------------------
def as_operations(
    records: Iterable[InspectorMetricsRecord], pid: int, rank_in: Callable[[int], int | None]
) -> tuple[list[InspectorRecord], list[InspectorMetricsRecord]]:
    """The verbose OTLP operations of one process (``pid``; ``rank_in``: its rank in a communicator of n ranks, None
    where unknown) as the records a dump file gives, and the records that cannot be: buckets, device counters, and
    operations whose communicator id, rank or time is unknown, these with the process's ``pid``.

    What a dump record has and these do not: the timing source (None here) and the dump time, for which the
    operation's own completion time stands (the plugin stamps each point with it); the capture model is ``ring``
    (the export drains each communicator's ring of completed operations, as dumps from v4.1 do)."""
    ops: list[InspectorRecord] = []
    rest: list[InspectorMetricsRecord] = []
    for m in records:
        rank = rank_in(m.n_ranks) if m.n_ranks is not None else None
        if (m.shape != "op" or rank is None or m.comm_id in (None, "unknown") or m.ts_us is None or m.op is None
                or m.op_kind is None or m.sn is None or m.msg_size_bytes is None):  # fmt: skip
            rest.append(msgspec.structs.replace(m, pid=pid))
            continue
        assert m.n_ranks is not None and m.comm_id is not None
        expected, mismatch = busbw_check(m.op, m.n_ranks, m.msg_size_bytes, m.exec_time_us, m.busbw_gbs)
        ops.append(
            InspectorRecord(
                comm_id=m.comm_id,
                comm_name=None if m.comm_name == "unknown" else m.comm_name,
                rank=rank,
                n_ranks=m.n_ranks,
                nnodes=m.n_nodes,
                hostname=m.hostname,
                pid=pid,
                op_kind=m.op_kind,
                op=m.op,
                sn=m.sn,
                peer=m.peer,
                msg_size_bytes=m.msg_size_bytes,
                exec_time_us=m.exec_time_us,
                algobw_gbs=m.algobw_gbs,
                busbw_gbs=m.busbw_gbs,
                dump_ts_us=m.ts_us,
                capture_model="ring",
                busbw_expected_gbs=expected,
                bw_mismatch=mismatch,
            )
        )
    return ops, rest
