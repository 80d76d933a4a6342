"""The query API's section: ``[aggregator.query]``."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, model_validator

from ranksight.core.config import Section


class QuerySettings(Section):
    """The query API, SQL over history, retention and export (``aggregator.query``)."""

    sql_time_limit_s: float = Field(10.0, gt=0, description="a SQL query is interrupted after this")
    sql_max_rows: int = Field(10_000, ge=1, description="rows returned at most; beyond it truncated=true")
    reader_threads: int = Field(
        4,
        ge=2,
        description="reader cursors: user SQL takes at most sql_max_concurrent, the built-in queries the rest",
    )
    sql_max_concurrent: int = Field(2, ge=1, description="user SQL queries that run at once")
    sql_queue_wait_s: float = Field(
        2.0, ge=0, description="a SQL query waits this long for a free slot, then is answered busy"
    )
    sql_memory_limit_bytes: int = Field(
        128 << 20,
        ge=16 << 20,
        description="DuckDB memory for SQL queries (larger sorts and joins spill to sql_temp_max_bytes); more fails "
        "with out of memory. DuckDB keeps the history it wrote cached in what queries leave free, so the aggregator's "
        "RSS grows by this plus writer_memory_limit_bytes over its first minutes (at 1024 nodes about 1 MiB/s)",
    )
    writer_memory_limit_bytes: int = Field(
        128 << 20,
        ge=16 << 20,
        description="DuckDB memory for ingest and retention, added to DuckDB's memory_limit (at 1024 nodes a commit's "
        "appended rows and their checkpoint take about 100 MiB)",
    )
    sql_threads: int = Field(
        1,
        ge=1,
        description="DuckDB's threads setting, for ingest's inserts and checkpoints as for queries: 1 keeps ingest's "
        "work on its writer thread (at 1024 nodes 3-4 % of a core and 20-40 MiB less than 2); more let large queries "
        "scan in parallel (a 10-million-row per-rank query: 74 ms with 1, 47 with 2, on 2 cores)",
    )
    sql_temp_max_bytes: int = Field(
        4 << 30,
        ge=0,
        description="disk that spilling queries may use in <db file>.tmp (max_temp_directory_size)",
    )
    sql_max_generated: int = Field(
        10_000_000,
        ge=1,
        description="elements that sized scalar functions (range(n), repeat(s, n), lpad...) may build in one query",
    )
    max_requests_in_flight: int = Field(
        1000, ge=1, description="NATS API requests answered at once; more are answered busy"
    )
    page_ttl_s: float = Field(
        60.0, gt=0, description="pages of an answer over the NATS max_payload are kept this long for `next`"
    )
    page_cache_bytes: int = Field(
        256 << 20,
        ge=1 << 20,
        description="pages waiting to be asked for, all answers together (oldest dropped)",
    )
    retention_interval_s: float = Field(
        3600, gt=0, description="how often history older than retention_days goes"
    )
    export_enabled: bool = Field(
        True, description="allow `ranksight export` to write Parquet on the aggregator host"
    )
    export_root: Path | None = Field(
        None, description="export writes only under this folder; default <state_dir>/exports"
    )
    series_max_points: int = Field(
        1000, ge=2, description="time buckets per series answer at most (web page charts)"
    )
    series_max_lines: int = Field(
        512, ge=1, description="lines (GPUs, ports, ranks...) per series answer at most"
    )
    series_max_range_s: float = Field(
        7 * 86400, gt=0, description="the longest time range one series answer may cover"
    )

    @model_validator(mode="after")
    def _lane_for_builtin_queries(self) -> QuerySettings:
        if self.sql_max_concurrent >= self.reader_threads:
            raise ValueError(
                "sql_max_concurrent must be below reader_threads: the built-in queries need a cursor too"
            )
        return self
