"""``nic``: one RDMA port or netdev sample: raw counters plus rates from deltas (wrap and reset handled on the agent).

Rates are null on the first sample of a device and on an interval where a counter was reset. ``link_flaps`` counts link
transitions seen during the interval (state changes, ``carrier_changes`` or ``link_downed`` increments).

``counters`` holds every counter of the port when ``counters_full`` (the first sample of a port, then at most every
``agent.collectors.nic.counters_full_every_s``), else only those whose value changed since the port's previous record:
an AMD Pollara port has about 600 ``ethtool -S`` counters, most of them zero and still. A counter's value at a time is
its latest value in the port's records up to then.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

import msgspec

from ranksight.schemas.records.base import Record, RecordKind
from ranksight.schemas.records.quantities import Count, Counter, Gauge, Seconds


class NicRecord(Record, kw_only=True, frozen=True):
    schema_version: ClassVar[int] = 2  # 2: `counters_full`

    name: str
    kind: Literal["rdma", "netdev"]
    state: str | None = None
    phys_state: str | None = None
    link_layer: str | None = None
    speed_bps: Gauge | None = None
    tx_bytes: Counter | None = None
    rx_bytes: Counter | None = None
    tx_packets: Counter | None = None
    rx_packets: Counter | None = None
    tx_bps: Gauge | None = None
    rx_bps: Gauge | None = None
    interval_s: Seconds | None = None
    errors_per_s: Gauge | None = None
    congestion_per_s: Gauge | None = None
    link_flaps: Count = 0
    counter_resets: Count = 0
    counters: dict[str, Counter] = msgspec.field(default_factory=dict)
    counters_full: Annotated[
        bool,
        msgspec.Meta(
            description="`counters` holds every counter (else only those changed since the port's previous record)"
        ),
    ] = True


KINDS = [
    RecordKind("nic", NicRecord, collector="nic", tracker="nics", parse="ranksight.agent.collectors.nic.cli"),
]
