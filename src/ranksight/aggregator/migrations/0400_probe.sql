-- Link probes (issue 6): the probe record gains mode and skipped; endpoints are announced; link_history is the view to query.

DROP TABLE IF EXISTS probe;
CREATE TABLE probe (
    cluster VARCHAR NOT NULL, node VARCHAR NOT NULL, agent VARCHAR NOT NULL, seq BIGINT NOT NULL,
    ts TIMESTAMP NOT NULL, recv_ts TIMESTAMP NOT NULL, ttl DOUBLE NOT NULL,
    src VARCHAR, dst VARCHAR, transport VARCHAR, dst_addr VARCHAR, mode VARCHAR, rtt_us DOUBLE, jitter_us DOUBLE,
    upload_bps DOUBLE, download_bps DOUBLE, bytes BIGINT, duration_s DOUBLE, skipped VARCHAR, error VARCHAR
);

CREATE TABLE probe_endpoint (
    cluster VARCHAR NOT NULL, node VARCHAR NOT NULL, agent VARCHAR NOT NULL, seq BIGINT NOT NULL,
    ts TIMESTAMP NOT NULL, recv_ts TIMESTAMP NOT NULL, ttl DOUBLE NOT NULL,
    addrs JSON, port BIGINT, transport VARCHAR, rail VARCHAR
);

-- One row per measurement of a link (source, destination, transport, destination address), oldest first per link.
-- measured = receipt time at the aggregator; expires = measured + the result's TTL (after which the planner re-probes).
CREATE VIEW link_history AS
SELECT cluster, src, dst, transport, dst_addr, mode,
       upload_bps, download_bps, rtt_us, jitter_us, bytes, duration_s, skipped, error,
       recv_ts AS measured, recv_ts + to_microseconds(CAST(ttl * 1e6 AS BIGINT)) AS expires
FROM probe;
