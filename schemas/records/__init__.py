"""One record model per event kind; ``RECORD_MODELS`` is the registry the codec and the store use."""

from __future__ import annotations

from ranksight.schemas.records.app import AppRecord
from ranksight.schemas.records.base import Record
from ranksight.schemas.records.gpu import GpuLink, GpuRecord
from ranksight.schemas.records.gpu_probe import GpuProbeRecord
from ranksight.schemas.records.heartbeat import CollectorHealth, HeartbeatRecord, PublisherStats
from ranksight.schemas.records.inspector import InspectorRecord
from ranksight.schemas.records.inspector_summary import InspectorSummaryRecord
from ranksight.schemas.records.nic import NicRecord
from ranksight.schemas.records.probe import ProbeEndpointRecord, ProbeRecord
from ranksight.schemas.records.ras import RasEventRecord, RasRecord

RECORD_MODELS: dict[str, type[Record]] = {
    "heartbeat": HeartbeatRecord,
    "ras": RasRecord,
    "ras_event": RasEventRecord,
    "inspector": InspectorRecord,
    "inspector_summary": InspectorSummaryRecord,
    "gpu": GpuRecord,
    "nic": NicRecord,
    "probe": ProbeRecord,
    "probe_endpoint": ProbeEndpointRecord,
    "gpu_probe": GpuProbeRecord,
    "app": AppRecord,
}

__all__ = [
    "RECORD_MODELS",
    "AppRecord",
    "CollectorHealth",
    "GpuLink",
    "GpuProbeRecord",
    "GpuRecord",
    "HeartbeatRecord",
    "InspectorRecord",
    "InspectorSummaryRecord",
    "NicRecord",
    "ProbeEndpointRecord",
    "ProbeRecord",
    "PublisherStats",
    "RasEventRecord",
    "RasRecord",
    "Record",
]
