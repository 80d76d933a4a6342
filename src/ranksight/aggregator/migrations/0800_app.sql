-- app: signals from training processes (heartbeats, sections, markers) through ranksight.client; see schemas/records/app.py.
DROP TABLE IF EXISTS app;

CREATE TABLE app (
    cluster VARCHAR NOT NULL, node VARCHAR NOT NULL, agent VARCHAR NOT NULL, seq BIGINT NOT NULL,
    ts TIMESTAMP NOT NULL, recv_ts TIMESTAMP NOT NULL, ttl DOUBLE NOT NULL,
    event VARCHAR, job_id VARCHAR, rank BIGINT, local_rank BIGINT, world_size BIGINT, pid BIGINT, n BIGINT,
    client_ts BIGINT, dropped BIGINT, step BIGINT, step_time_s DOUBLE, open_sections JSON, section VARCHAR,
    section_id BIGINT, duration_s DOUBLE, ok BOOLEAN, timeout_s DOUBLE, initial_timeout_s DOUBLE, text VARCHAR,
    fields JSON
);
