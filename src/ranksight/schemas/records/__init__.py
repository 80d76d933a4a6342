"""One record struct per event kind, and ``RECORD_KINDS``: every kind the modules of this package declare.

A kind is declared once, beside its struct: the module's ``KINDS`` list of :class:`RecordKind` (a module declares
several when one collector publishes several kinds). Nothing here lists them: ``RECORD_KINDS`` gathers the ``KINDS``
of every module of the package, in module-name order, then in each module's order. Everything else derives from a
kind: its records are ``model``, a msgspec struct that the agent builds and the codec decodes into
(:mod:`schemas.codec`); the aggregator's table of the same name has the envelope columns then one column per field
(created and extended from the struct by the store, ``aggregator.columns``); its envelopes carry the TTL of the agent
collector ``collector`` (``agent.collectors.<collector>.ttl_s``); live state hands it to the tracker ``tracker`` (an
attribute of ``aggregator.state.LiveState``); ``ranksight parse`` offers the captured-output parsers of module
``parse``. Collectors, trackers and parse modules are named, not imported, so the wire contract imports nothing of
the agent or the aggregator; a test resolves every name.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable

from ranksight.schemas.records.app import AppRecord
from ranksight.schemas.records.base import Record, RecordKind
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


def declared_kinds(package: str, path: Iterable[str]) -> list[RecordKind]:
    """The ``KINDS`` of every module of ``package`` (found on ``path``), in module-name order."""
    modules = sorted(info.name for info in pkgutil.iter_modules(path))
    return [
        kind
        for name in modules
        for kind in getattr(importlib.import_module(f"{package}.{name}"), "KINDS", [])
    ]


RECORD_KINDS: dict[str, RecordKind] = {kind.name: kind for kind in declared_kinds(__name__, __path__)}

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
