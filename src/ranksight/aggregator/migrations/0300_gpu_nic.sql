-- GPU and NIC tables reshaped by the gpu/nic collectors (issue 5): GPU links, NIC rates, flaps, resets.

DROP TABLE IF EXISTS gpu;
CREATE TABLE gpu (
    cluster VARCHAR NOT NULL, node VARCHAR NOT NULL, agent VARCHAR NOT NULL, seq BIGINT NOT NULL,
    ts TIMESTAMP NOT NULL, recv_ts TIMESTAMP NOT NULL, ttl DOUBLE NOT NULL,
    "index" BIGINT, uuid VARCHAR, bus_id VARCHAR, name VARCHAR, vendor VARCHAR, source VARCHAR,
    utilization_pct DOUBLE, memory_used_bytes BIGINT, memory_total_bytes BIGINT, power_w DOUBLE, power_cap_w DOUBLE,
    temperature_edge_c DOUBLE, temperature_junction_c DOUBLE, temperature_memory_c DOUBLE, sclk_hz DOUBLE,
    mclk_hz DOUBLE, ecc_correctable BIGINT, ecc_uncorrectable BIGINT, pcie_replays BIGINT, throttled BOOLEAN,
    throttle_reasons JSON, links JSON
);

DROP TABLE IF EXISTS nic;
CREATE TABLE nic (
    cluster VARCHAR NOT NULL, node VARCHAR NOT NULL, agent VARCHAR NOT NULL, seq BIGINT NOT NULL,
    ts TIMESTAMP NOT NULL, recv_ts TIMESTAMP NOT NULL, ttl DOUBLE NOT NULL,
    name VARCHAR, kind VARCHAR, state VARCHAR, phys_state VARCHAR, link_layer VARCHAR, speed_bps DOUBLE,
    tx_bytes BIGINT, rx_bytes BIGINT, tx_packets BIGINT, rx_packets BIGINT, tx_bps DOUBLE, rx_bps DOUBLE,
    interval_s DOUBLE, errors_per_s DOUBLE, congestion_per_s DOUBLE, link_flaps BIGINT, counter_resets BIGINT,
    counters JSON
);
