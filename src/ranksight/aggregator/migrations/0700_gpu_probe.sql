-- gpu_probe: active GPU measurements (issue 10). Not in 0002, so DROP IF EXISTS keeps this re-runnable from scratch.

DROP TABLE IF EXISTS gpu_probe;

CREATE TABLE gpu_probe (
    cluster VARCHAR NOT NULL, node VARCHAR NOT NULL, agent VARCHAR NOT NULL, seq BIGINT NOT NULL,
    ts TIMESTAMP NOT NULL, recv_ts TIMESTAMP NOT NULL, ttl DOUBLE NOT NULL,
    "index" BIGINT, status VARCHAR, reason VARCHAR, name VARCHAR, uuid VARCHAR, backend VARCHAR,
    tflops_bf16 DOUBLE, tflops_fp16 DOUBLE, mem_bandwidth_bps DOUBLE, duration_s DOUBLE,
    matmul_n BIGINT, mem_bytes BIGINT
);
