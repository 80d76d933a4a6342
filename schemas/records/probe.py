"""``probe``: one active link measurement from this node to a peer."""

from __future__ import annotations

from schemas.records.base import Record


class ProbeRecord(Record):
    src: str
    dst: str
    transport: str = "tcp"
    dst_addr: str
    rtt_us: float | None = None
    jitter_us: float | None = None
    upload_bps: float | None = None
    download_bps: float | None = None
    bytes: int = 0
    duration_s: float = 0.0
    error: str | None = None
