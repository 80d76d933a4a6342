"""``probe``: one active link measurement from this node to a peer; ``probe_endpoint``: where a node can be probed.

``ProbeCommand`` is the body of the ``probe`` agent command the aggregator's planner sends
(``<prefix>.agent.<cluster>.<node>.probe``); the agent answers with the resulting :class:`ProbeRecord` as JSON.
Rates are bits per second, timed on the receiving side.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from ranksight.schemas.records.base import Record, RecordKind
from ranksight.schemas.records.quantities import Bytes, Gauge, Micros, Port, Seconds
from ranksight.schemas.wire import INT64_MAX

ProbeMode = Literal["full", "light"]  # light: RTT and jitter only (a node runs a job)


class ProbeRecord(Record, kw_only=True, frozen=True):
    src: str
    dst: str
    transport: str = "tcp"
    dst_addr: str
    mode: ProbeMode = "full"
    rtt_us: Micros | None = None
    jitter_us: Micros | None = None
    upload_bps: Gauge | None = None  # src -> dst
    download_bps: Gauge | None = None  # dst -> src
    bytes: Bytes = 0
    duration_s: Seconds = 0.0
    skipped: str | None = None  # why bandwidth was not measured, when it was not
    error: str | None = None
    # share of the bandwidth phases each end's probe loop was stalled (busy or starved of CPU): a high share means the
    # rates measured the host, not the link. src: the prober, both phases; dst: the probed server, the upload phase.
    src_stall_share: Gauge | None = None
    dst_stall_share: Gauge | None = None


class ProbeEndpointRecord(Record, kw_only=True, frozen=True):
    """Announced by every agent's probe collector each interval: the planner probes only nodes it has heard of."""

    min_records = 1

    addrs: list[str]
    port: Port
    transport: str = "tcp"
    rail: str | None = None


KINDS = [
    RecordKind("probe", ProbeRecord, collector="probe", tracker="links"),
    RecordKind("probe_endpoint", ProbeEndpointRecord, collector="probe", tracker="links"),
]


class ProbeCommand(msgspec.Struct, kw_only=True, frozen=True, gc=False, forbid_unknown_fields=True):
    peer: Annotated[str, msgspec.Meta(min_length=1, description="the destination node's name")]
    addr: Annotated[str, msgspec.Meta(min_length=1)]
    port: Port
    mode: ProbeMode = "full"
    skipped: str | None = None
    echo_count: Annotated[int, msgspec.Meta(ge=1, le=1000)] = 50
    bytes: Annotated[int, msgspec.Meta(ge=1, le=INT64_MAX)] = 64 * 1024**2
    seconds: Annotated[float, msgspec.Meta(gt=0, le=30)] = 1.0
