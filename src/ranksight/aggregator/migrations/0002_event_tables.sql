-- First version of the tables of the other event kinds (their owners extend them with later migrations).

CREATE TABLE ras (
    cluster VARCHAR NOT NULL, node VARCHAR NOT NULL, agent VARCHAR NOT NULL, seq BIGINT NOT NULL,
    ts TIMESTAMP NOT NULL, recv_ts TIMESTAMP NOT NULL, ttl DOUBLE NOT NULL,
    job_id VARCHAR, endpoint VARCHAR, format VARCHAR, version VARCHAR, health VARCHAR,
    nodes BIGINT, processes BIGINT, gpus BIGINT,
    communicators JSON, missing_processes JSON, dead_processes JSON, timeouts BIGINT
);

CREATE TABLE ras_event (
    cluster VARCHAR NOT NULL, node VARCHAR NOT NULL, agent VARCHAR NOT NULL, seq BIGINT NOT NULL,
    ts TIMESTAMP NOT NULL, recv_ts TIMESTAMP NOT NULL, ttl DOUBLE NOT NULL,
    job_id VARCHAR, endpoint VARCHAR, time VARCHAR, event VARCHAR, host VARCHAR, pid BIGINT, details VARCHAR
);

CREATE TABLE inspector (
    cluster VARCHAR NOT NULL, node VARCHAR NOT NULL, agent VARCHAR NOT NULL, seq BIGINT NOT NULL,
    ts TIMESTAMP NOT NULL, recv_ts TIMESTAMP NOT NULL, ttl DOUBLE NOT NULL,
    comm_id VARCHAR, comm_name VARCHAR, rank BIGINT, n_ranks BIGINT, nnodes BIGINT, hostname VARCHAR, pid BIGINT,
    op_kind VARCHAR, op VARCHAR, sn BIGINT, peer BIGINT, msg_size_bytes BIGINT, exec_time_us DOUBLE,
    timing_source VARCHAR, algobw_gbs DOUBLE, busbw_gbs DOUBLE, dump_ts_us BIGINT
);

CREATE TABLE gpu (
    cluster VARCHAR NOT NULL, node VARCHAR NOT NULL, agent VARCHAR NOT NULL, seq BIGINT NOT NULL,
    ts TIMESTAMP NOT NULL, recv_ts TIMESTAMP NOT NULL, ttl DOUBLE NOT NULL,
    "index" BIGINT, uuid VARCHAR, bus_id VARCHAR, name VARCHAR, vendor VARCHAR, source VARCHAR,
    utilization_pct DOUBLE, memory_used_bytes BIGINT, memory_total_bytes BIGINT, power_w DOUBLE, power_cap_w DOUBLE,
    temperature_edge_c DOUBLE, temperature_junction_c DOUBLE, temperature_memory_c DOUBLE, sclk_hz DOUBLE,
    mclk_hz DOUBLE, ecc_correctable BIGINT, ecc_uncorrectable BIGINT, pcie_replays BIGINT, throttled BOOLEAN,
    throttle_reasons JSON
);

CREATE TABLE nic (
    cluster VARCHAR NOT NULL, node VARCHAR NOT NULL, agent VARCHAR NOT NULL, seq BIGINT NOT NULL,
    ts TIMESTAMP NOT NULL, recv_ts TIMESTAMP NOT NULL, ttl DOUBLE NOT NULL,
    name VARCHAR, kind VARCHAR, state VARCHAR, phys_state VARCHAR, speed_bps DOUBLE,
    tx_bytes BIGINT, rx_bytes BIGINT, tx_packets BIGINT, rx_packets BIGINT, tx_bps DOUBLE, rx_bps DOUBLE,
    counters JSON
);

CREATE TABLE probe (
    cluster VARCHAR NOT NULL, node VARCHAR NOT NULL, agent VARCHAR NOT NULL, seq BIGINT NOT NULL,
    ts TIMESTAMP NOT NULL, recv_ts TIMESTAMP NOT NULL, ttl DOUBLE NOT NULL,
    src VARCHAR, dst VARCHAR, transport VARCHAR, dst_addr VARCHAR, rtt_us DOUBLE, jitter_us DOUBLE,
    upload_bps DOUBLE, download_bps DOUBLE, bytes BIGINT, duration_s DOUBLE, error VARCHAR
);
