-- RAS tables reshaped to the issue-3 record models (schemas/records/ras.py), plus the job health view.

DROP TABLE ras;
CREATE TABLE ras (
    cluster VARCHAR NOT NULL, node VARCHAR NOT NULL, agent VARCHAR NOT NULL, seq BIGINT NOT NULL,
    ts TIMESTAMP NOT NULL, recv_ts TIMESTAMP NOT NULL, ttl DOUBLE NOT NULL,
    job_id VARCHAR,             -- scheduler job id (slurm-123) or a stable ras-<hash> id
    endpoint VARCHAR,           -- the RAS endpoint polled (host:port)
    format VARCHAR,             -- text | json
    version VARCHAR,            -- NCCL/RCCL version, when the reply says
    health VARCHAR,             -- ok | warning | degraded | failed
    nodes BIGINT, processes BIGINT, gpus BIGINT,
    communicators JSON,         -- [{hash, secondary_hash, size, status, errors, missing_ranks, ranks_reporting,
                                --   rank_status, op_counts}]
    missing_processes JSON,     -- [{host, pid, gpus}]
    dead_processes JSON,        -- [{host, pid, gpus}]
    mismatches JSON,            -- [{hash, kind, collective}]
    timeouts BIGINT,
    collection_s DOUBLE
);

DROP TABLE ras_event;
CREATE TABLE ras_event (
    cluster VARCHAR NOT NULL, node VARCHAR NOT NULL, agent VARCHAR NOT NULL, seq BIGINT NOT NULL,
    ts TIMESTAMP NOT NULL, recv_ts TIMESTAMP NOT NULL, ttl DOUBLE NOT NULL,
    job_id VARCHAR, endpoint VARCHAR,
    time VARCHAR,               -- the server's timestamp text
    event_group VARCHAR,        -- LIFECYCLE | TRACE | RANKSIGHT (agent-side ENDPOINT_CLOSED)
    event VARCHAR,              -- PEER_DEAD, ..., ENDPOINT_CLOSED
    host VARCHAR, pid BIGINT, gpus JSON, details VARCHAR
);

-- One row per job: the latest health, how long it has been polled, and how many polls were not ok.
CREATE VIEW v_job_health AS
SELECT cluster, job_id,
       arg_max(health, recv_ts)   AS health,
       arg_max(version, recv_ts)  AS version,
       arg_max(endpoint, recv_ts) AS endpoint,
       min(recv_ts)               AS first_poll,
       max(recv_ts)               AS last_poll,
       count(*)                   AS polls,
       count(*) FILTER (WHERE health <> 'ok') AS unhealthy_polls
FROM ras
GROUP BY cluster, job_id;
