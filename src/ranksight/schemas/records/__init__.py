"""One record struct per event kind, and ``RECORD_KINDS``: the one registration of each kind.

A kind is declared once, here, and everything else derives from it: its records are ``model``, a msgspec struct that
the agent builds and the codec decodes into (:mod:`schemas.codec`); the aggregator's table of the same name has the
envelope columns then one column per field (created and extended from the struct by the store,
``aggregator.columns``); its envelopes carry the TTL of the agent collector ``collector``
(``agent.collectors.<collector>.ttl_s``); live state hands it to the tracker ``tracker`` (an attribute of
``aggregator.state.LiveState``); ``ranksight parse`` offers the captured-output parsers of module ``parse``. Trackers
and parse modules are named, not imported, so the wire contract imports nothing of the agent or the aggregator; a test
resolves every name.
"""

from __future__ import annotations

from dataclasses import dataclass

from ranksight.schemas.records.app import AppRecord
from ranksight.schemas.records.base import Record
from ranksight.schemas.records.gpu import GpuLink, GpuRecord
from ranksight.schemas.records.gpu_probe import GpuProbeRecord
from ranksight.schemas.records.gpu_xid import GpuXidRecord
from ranksight.schemas.records.heartbeat import CollectorHealth, HeartbeatRecord, PublisherStats
from ranksight.schemas.records.inspector import InspectorRecord
from ranksight.schemas.records.inspector_dumps import InspectorDumpStatsRecord
from ranksight.schemas.records.inspector_metrics import InspectorMetricsRecord
from ranksight.schemas.records.inspector_summary import InspectorSummaryRecord
from ranksight.schemas.records.nic import NicRecord
from ranksight.schemas.records.probe import ProbeEndpointRecord, ProbeRecord
from ranksight.schemas.records.ras import RasDiagnosticsRecord, RasEventRecord, RasRecord


@dataclass(frozen=True)
class RecordKind:
    name: str  # the envelope's kind, a subject token, and the aggregator's table
    model: type[Record]
    collector: str  # the agent collector that publishes it; its settings' ttl_s is the kind's TTL
    tracker: str | None  # the LiveState tracker that keeps its live state; None: history only
    parse: str | None = None  # module with ``register_parse(sources)`` for ``ranksight parse``


RECORD_KINDS: dict[str, RecordKind] = {
    kind.name: kind
    for kind in (
        RecordKind("heartbeat", HeartbeatRecord, collector="heartbeat", tracker="nodes"),
        RecordKind(
            "ras", RasRecord, collector="ras", tracker="jobs", parse="ranksight.agent.collectors.ras.cli"
        ),
        RecordKind(
            "ras_event",
            RasEventRecord,
            collector="ras",
            tracker="jobs",
            parse="ranksight.agent.collectors.ras.cli",
        ),
        RecordKind("ras_diagnostics", RasDiagnosticsRecord, collector="ras", tracker="jobs"),
        RecordKind("inspector", InspectorRecord, collector="inspector", tracker="stragglers"),
        RecordKind("inspector_summary", InspectorSummaryRecord, collector="inspector", tracker="stragglers"),
        RecordKind(
            "inspector_dump_stats", InspectorDumpStatsRecord, collector="inspector", tracker="inspector_drops"
        ),
        RecordKind(
            "inspector_metrics", InspectorMetricsRecord, collector="inspector", tracker="inspector_drops"
        ),
        RecordKind(
            "gpu", GpuRecord, collector="gpu", tracker="gpus", parse="ranksight.agent.collectors.gpu.cli"
        ),
        RecordKind(
            "nic", NicRecord, collector="nic", tracker="nics", parse="ranksight.agent.collectors.nic.cli"
        ),
        RecordKind("probe", ProbeRecord, collector="probe", tracker="links"),
        RecordKind("probe_endpoint", ProbeEndpointRecord, collector="probe", tracker="links"),
        RecordKind("gpu_probe", GpuProbeRecord, collector="gpu_probe", tracker="gpu_probes"),
        RecordKind("app", AppRecord, collector="app", tracker="app"),
        RecordKind("gpu_xid", GpuXidRecord, collector="xid", tracker="xids"),
    )
}

__all__ = [
    "RECORD_KINDS",
    "AppRecord",
    "CollectorHealth",
    "GpuLink",
    "GpuProbeRecord",
    "GpuRecord",
    "GpuXidRecord",
    "HeartbeatRecord",
    "InspectorDumpStatsRecord",
    "InspectorMetricsRecord",
    "InspectorRecord",
    "InspectorSummaryRecord",
    "NicRecord",
    "ProbeEndpointRecord",
    "ProbeRecord",
    "PublisherStats",
    "RasDiagnosticsRecord",
    "RasEventRecord",
    "RasRecord",
    "Record",
    "RecordKind",
]
