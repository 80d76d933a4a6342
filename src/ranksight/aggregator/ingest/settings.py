"""Ingest's section: ``[aggregator.ingest]``."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ranksight.core.config import Section


class IngestSettings(Section):
    """Bounds on what one peer can make ingest hold or keep (``[aggregator.ingest]``)."""

    fetch_max_bytes: int = Field(
        32 << 20,
        ge=1 << 20,
        description="bytes per fetched batch (raised to the server's max_payload if below)",
    )
    fetch_max_records: int = Field(
        200_000,
        ge=1,
        description="decoded records per commit: the rest of a fetched batch waits for the next commit, "
        "unacknowledged (a message is never split: one alone may bring up to its 100,000 records)",
    )
    max_ttl_s: float = Field(7 * 86400, gt=0, description="an envelope's ttl above this is dead-lettered")
    max_clock_ahead_s: float = Field(86400, gt=0, description="envelope ts at most this far after receipt")
    max_clock_behind_s: float = Field(
        30 * 86400,
        gt=0,
        description="envelope ts at most this far before receipt (keep above stream_max_age_s)",
    )
    max_seq_jump: int = Field(
        1_000_000,
        ge=1,
        description="a larger jump in an incarnation's seq opens no gap (counted as a seq jump)",
    )
    max_incarnations_per_node: int = Field(
        8, ge=1, description="sequence state kept per node; the least recently seen incarnation is forgotten"
    )
    conflict_window: int = Field(
        64,
        ge=0,
        description="recent messages per incarnation remembered to tell a re-send from a conflicting one",
    )
    max_nodes: int = Field(
        20_000, ge=1, description="nodes tracked at once; events of further nodes are dead-lettered"
    )
    max_sub_records: int = Field(
        65_536,
        ge=1024,
        description="entries of a record's lists and maps together (a GPU's links, a port's counters, a job's "
        "communicators) at most; a record with more is dead-lettered (too_many_sub_records)",
    )
    node_forget_after_s: float = Field(
        86400,
        gt=0,
        description="nodes silent this long leave live state and sequence state (history keeps them)",
    )
    checkpoint_wal_mib: int = Field(
        64,
        ge=1,
        le=4096,
        description="write-ahead log size that makes a commit checkpoint into the database file (DuckDB's own "
        "default, 16, rewrote each table's newest row group about every second at 1024 nodes)",
    )
    row_group_rows: int = Field(
        32_768,
        ge=2048,
        le=1_048_576,
        multiple_of=2048,
        description="rows per row group of the history's tables (DuckDB's ROW_GROUP_SIZE, 122,880 by default): "
        "a checkpoint rewrites each table's newest row group, and at 1024 nodes DuckDB's own size lifted the "
        "aggregator's RSS by about 400 MiB at each one, this one by about 200",
    )
    commit_every_s: float = Field(
        0.5,
        ge=0,
        le=5,
        description="while ingest is caught up (nothing waits in the stream behind a fetch), it commits at most this "
        "often: much of a commit's cost does not grow with its size (at 256 nodes, committing each fetch as it "
        "came took 1.3 x the writer's CPU); a message waits up to this long more before it is live (0: at once)",
    )
    nic_history_counters: Literal["full", "all"] = Field(
        "full",
        description="which `nic` history rows keep their `counters` map: `full`, the records that carry every counter "
        "of their port (its first, then at most every agent `counters_full_every_s`); `all`, also the records of "
        "the counters changed in between. Every row keeps its typed columns (bytes, packets, rates, error and "
        "congestion rates, flaps) and live state follows every change either way; `all` at 1024 nodes of ionic NICs "
        "(607 counters a port): about 0.07 of a core more and most of the history's bytes",
    )
    dead_letter_payload_bytes: int = Field(4096, ge=0, description="payload bytes kept per dead letter")
    dead_letter_retention_days: float = Field(7, gt=0, description="dead letters older than this are deleted")
