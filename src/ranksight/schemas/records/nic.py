"""``nic``: one RDMA port or netdev sample: raw counters plus rates from deltas (wrap and reset handled on the agent).

Rates are null on the first sample of a device and on an interval where a counter was reset. ``link_flaps`` counts link
transitions seen during the interval (state changes, ``carrier_changes`` or ``link_downed`` increments).

``counters`` holds every counter of the port when ``counters_full`` (the first sample of a port, then at most every
``agent.collectors.nic.counters_full_every_s``), else only those whose value changed since the port's previous record:
an AMD Pollara port has about 600 ``ethtool -S`` counters, most of them zero and still. A counter's value at a time is
its latest value in the port's records up to then.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from ranksight.schemas.records.base import Record


class NicRecord(Record):
    schema_version: ClassVar[int] = 2  # 2: `counters_full`

    name: str
    kind: Literal["rdma", "netdev"]
    state: str | None = None
    phys_state: str | None = None
    link_layer: str | None = None
    speed_bps: float | None = None
    tx_bytes: int | None = None
    rx_bytes: int | None = None
    tx_packets: int | None = None
    rx_packets: int | None = None
    tx_bps: float | None = None
    rx_bps: float | None = None
    interval_s: float | None = None
    errors_per_s: float | None = None
    congestion_per_s: float | None = None
    link_flaps: int = 0
    counter_resets: int = 0
    counters: dict[str, int] = Field(default_factory=dict)
    counters_full: bool = Field(
        True,
        description="`counters` holds every counter (else only those changed since the port's previous record)",
    )
