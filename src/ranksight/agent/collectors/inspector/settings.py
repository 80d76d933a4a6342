"""The Inspector collector's section: ``[agent.collectors.inspector]``."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from ranksight.agent.collector_settings import CollectorSettings


class InspectorSettings(CollectorSettings):
    interval_s: float = Field(1.0, gt=0, description="how often the dump directory is re-scanned when idle")
    dump_dir: Path | None = Field(
        None, description="the plugin's NCCL_INSPECTOR_DUMP_DIR; unset or missing: the collector is absent"
    )
    read_chunk_bytes: int = Field(1 << 20, ge=4096, description="most bytes read from one file per pass")
    # raw records on request (the ``inspector_raw`` command): bounds of one answer page
    raw_max_records: int = Field(2000, ge=1, description="inspector_raw: records per answer page at most")
    raw_max_bytes: int = Field(
        512 * 1024,
        ge=4096,
        description="inspector_raw: JSON bytes per answer page at most (and half max_payload)",
    )
    raw_scan_bytes: int = Field(
        32 << 20,
        ge=4096,
        description="inspector_raw: dump file bytes read per request at most (then a next page)",
    )
    raw_max_window_s: float = Field(
        3600.0, gt=0, description="inspector_raw: the widest [from, to] dump-time window a request may ask"
    )
    summary_window_s: float = Field(
        5.0,
        gt=0,
        description="inspector_summary window, aligned to wall-clock multiples (every node's line up)",
    )
    summary_slice_s: float = Field(
        0.5,
        gt=0,
        description="resolution of a summary's per-slice aggregates (match aggregator.stragglers.slice_s)",
    )
    summary_publish_s: float = Field(
        2.5,
        gt=0,
        description="how often the records read since the last time are published, one inspector_summary part per "
        "window and key (the parts of a window add up); shorter: alerts a little sooner, more rows for the aggregator "
        "(1 s: about 2 x the summary rows of 2.5 s)",
    )
    summary_max_keys: int = Field(
        100_000,
        ge=1,
        description="open (window, comm, collective, size, process) summaries at most; beyond: counted",
    )
    raw_rate_per_s: float = Field(
        10.0,
        ge=0,
        description="raw inspector records published per second at most, sampled fairly across comms (0: none); "
        "dump files keep every record on the node",
    )
    # the plugin's other outputs (inspector_metrics records): its Prometheus textfiles and its OTLP/HTTP export
    prom_files: bool = Field(
        True, description="read the plugin's Prometheus textfiles (nccl_inspector_metrics_*.prom) in dump_dir"
    )
    otlp_port: int | None = Field(
        None,
        ge=1,
        le=65535,
        description="loopback port of the OTLP/HTTP JSON receiver for the plugin's export (NCCL_INSPECTOR_OTEL_EXPORT"
        "=1 posts to http://localhost:4318/v1/metrics); unset: no receiver",
    )
    otlp_max_body_bytes: int = Field(
        8 << 20, ge=1024, description="OTLP receiver: bytes of one request body at most (beyond: 413)"
    )
    otlp_max_requests_per_s: float = Field(
        20.0,
        gt=0,
        description="OTLP receiver: requests per second at most, bursts of one second (beyond: 429)",
    )
    otlp_max_connections: int = Field(16, ge=1, description="OTLP receiver: open connections at most")
    otlp_read_timeout_s: float = Field(
        10.0, gt=0, description="OTLP receiver: time to read one request (headers and body)"
    )

    def summary_ttl(self) -> float:
        """A summary stays valid until the next window's should have come."""
        return 2 * self.summary_window_s + self.summary_publish_s
