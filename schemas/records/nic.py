"""``nic``: one RDMA port or netdev sample with counter rates from deltas."""

from __future__ import annotations

from typing import Literal

from schemas.records.base import Record


class NicRecord(Record):
    name: str
    kind: Literal["rdma", "netdev"]
    state: str | None = None
    phys_state: str | None = None
    speed_bps: float | None = None
    tx_bytes: int | None = None
    rx_bytes: int | None = None
    tx_packets: int | None = None
    rx_packets: int | None = None
    tx_bps: float | None = None
    rx_bps: float | None = None
    counters: dict[str, int] = {}
