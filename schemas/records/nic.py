"""``nic``: one RDMA port or netdev sample: raw counters plus rates from deltas (wrap and reset handled on the agent).

Rates are null on the first sample of a device and on an interval where a counter was reset. ``link_flaps`` counts link
transitions seen during the interval (state changes, ``carrier_changes`` or ``link_downed`` increments).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ranksight.schemas.records.base import Record


class NicRecord(Record):
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
