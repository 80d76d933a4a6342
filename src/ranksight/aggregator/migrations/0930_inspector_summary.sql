-- inspector_summary: agent-side Inspector summaries per window and (comm, collective, size bucket, process); see
-- schemas/records/inspector_summary.py. Additive: the raw inspector table is unchanged.
CREATE TABLE IF NOT EXISTS inspector_summary (
    cluster VARCHAR NOT NULL, node VARCHAR NOT NULL, agent VARCHAR NOT NULL, seq BIGINT NOT NULL,
    ts TIMESTAMP NOT NULL, recv_ts TIMESTAMP NOT NULL, ttl DOUBLE NOT NULL,
    window_start_us BIGINT, window_us BIGINT, slice_us BIGINT,
    comm_id VARCHAR, comm_name VARCHAR, rank BIGINT, n_ranks BIGINT, nnodes BIGINT, hostname VARCHAR, pid BIGINT,
    op_kind VARCHAR, op VARCHAR, size_bucket BIGINT, capture_model VARCHAR,
    count BIGINT, bytes BIGINT, timed BIGINT, exec_sum_us DOUBLE, exec_min_us DOUBLE, exec_max_us DOUBLE,
    exec_p50_us DOUBLE, exec_p90_us DOUBLE, exec_p99_us DOUBLE, algobw_gbs DOUBLE, busbw_gbs DOUBLE,
    bw_mismatches BIGINT, sn_first BIGINT, sn_last BIGINT, last_dump_ts_us BIGINT, late BIGINT,
    slice_index BIGINT[], slice_count BIGINT[], slice_exec_sum_us DOUBLE[], slice_exec_min_us DOUBLE[],
    slice_sn_lo BIGINT[], slice_sn_lo_ts_us BIGINT[], slice_sn_hi BIGINT[], slice_sn_hi_ts_us BIGINT[]
);

-- Per-rank collective statistics from the summaries (every record, where raw rows are a rate-limited sample): one row
-- per (cluster, comm, collective, size bucket, host, pid, rank).
CREATE VIEW inspector_summary_rank_stats AS
SELECT cluster, comm_id, any_value(comm_name) AS comm_name, op, size_bucket, hostname, pid, rank,
       any_value(n_ranks) AS n_ranks, sum(count) AS ops, sum(exec_sum_us) / nullif(sum(timed), 0) AS mean_exec_us,
       min(exec_min_us) AS min_exec_us, max(exec_max_us) AS max_exec_us, median(exec_p50_us) AS median_p50_exec_us,
       sum(bytes) AS bytes, sum(bw_mismatches) AS bw_mismatches, sum(late) AS late, max(recv_ts) AS last_seen
FROM inspector_summary
WHERE op_kind = 'coll'
GROUP BY cluster, comm_id, op, size_bucket, hostname, pid, rank;
