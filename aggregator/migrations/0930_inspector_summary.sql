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
