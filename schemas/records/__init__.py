"""One record model per event kind; ``RECORD_MODELS`` is the registry the codec and the store use."""

from __future__ import annotations

from schemas.records.app import AppRecord
from schemas.records.base import Record
from schemas.records.gpu import GpuRecord
from schemas.records.heartbeat import CollectorHealth, HeartbeatRecord, PublisherStats
from schemas.records.inspector import InspectorRecord
from schemas.records.nic import NicRecord
from schemas.records.probe import ProbeRecord
from schemas.records.ras import RasEventRecord, RasRecord

RECORD_MODELS: dict[str, type[Record]] = {
    "heartbeat": HeartbeatRecord,
    "ras": RasRecord,
    "ras_event": RasEventRecord,
    "inspector": InspectorRecord,
    "gpu": GpuRecord,
    "nic": NicRecord,
    "probe": ProbeRecord,
    "app": AppRecord,
}

__all__ = [
    "RECORD_MODELS",
    "AppRecord",
    "CollectorHealth",
    "GpuRecord",
    "HeartbeatRecord",
    "InspectorRecord",
    "NicRecord",
    "ProbeRecord",
    "PublisherStats",
    "RasEventRecord",
    "RasRecord",
    "Record",
]
