-- Inspector records gain the capture model and the recomputed bandwidth check; straggler views.
DROP TABLE IF EXISTS inspector;
CREATE TABLE inspector (
    cluster VARCHAR NOT NULL, node VARCHAR NOT NULL, agent VARCHAR NOT NULL, seq BIGINT NOT NULL,
    ts TIMESTAMP NOT NULL, recv_ts TIMESTAMP NOT NULL, ttl DOUBLE NOT NULL,
    comm_id VARCHAR, comm_name VARCHAR, rank BIGINT, n_ranks BIGINT, nnodes BIGINT, hostname VARCHAR, pid BIGINT,
    op_kind VARCHAR, op VARCHAR, sn BIGINT, peer BIGINT, msg_size_bytes BIGINT, exec_time_us DOUBLE,
    timing_source VARCHAR, algobw_gbs DOUBLE, busbw_gbs DOUBLE, dump_ts_us BIGINT,
    capture_model VARCHAR, busbw_expected_gbs DOUBLE, bw_mismatch BOOLEAN
);

-- Per-rank collective statistics: one row per (cluster, comm, collective, size, host, pid, rank).
CREATE VIEW inspector_rank_stats AS
SELECT cluster, comm_id, any_value(comm_name) AS comm_name, op, msg_size_bytes, hostname, pid, rank,
       any_value(n_ranks) AS n_ranks, count(*) AS ops, median(exec_time_us) AS median_exec_us,
       quantile_cont(exec_time_us, 0.9) AS p90_exec_us, median(busbw_gbs) AS median_busbw_gbs,
       count(*) FILTER (WHERE bw_mismatch) AS bw_mismatches, max(recv_ts) AS last_seen
FROM inspector
WHERE op_kind = 'coll'
GROUP BY cluster, comm_id, op, msg_size_bytes, hostname, pid, rank;

-- Straggler findings: every firing and resolved ``straggler`` alert with its evidence unpacked.
CREATE VIEW straggler_findings AS
SELECT fingerprint, state, cluster, node AS hostname, comm, rank,
       json_extract_string(evidence, '$.kind') AS kind,
       TRY_CAST(json_extract(evidence, '$.pid') AS BIGINT) AS pid,
       TRY_CAST(json_extract(evidence, '$.slowdown') AS DOUBLE) AS slowdown,
       TRY_CAST(json_extract(evidence, '$.confidence') AS DOUBLE) AS confidence,
       json_extract_string(evidence, '$.evidence') AS evidence, summary, started_at, resolved_at, updated_at
FROM alerts
WHERE rule = 'straggler';
