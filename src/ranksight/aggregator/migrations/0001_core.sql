-- Core tables: ingest bookkeeping, dead letters, alerts, and the heartbeat events.
-- Every event table starts with the envelope columns (cluster, node, agent, seq, ts, recv_ts, ttl);
-- the record's fields follow, nested values as JSON.

CREATE TABLE agent_seq (
    agent       VARCHAR PRIMARY KEY,   -- agent incarnation id
    cluster     VARCHAR NOT NULL,
    node        VARCHAR NOT NULL,
    high_seq    BIGINT  NOT NULL,      -- highest sequence number committed
    messages    BIGINT  NOT NULL,      -- messages committed
    duplicates  BIGINT  NOT NULL,      -- redeliveries and re-publishes skipped
    gaps_open   BIGINT  NOT NULL,      -- sequence numbers never received (so far)
    first_recv  TIMESTAMP NOT NULL,
    last_recv   TIMESTAMP NOT NULL
);

CREATE TABLE agent_seq_gaps (
    agent   VARCHAR NOT NULL,
    seq_lo  BIGINT  NOT NULL,
    seq_hi  BIGINT  NOT NULL
);

CREATE TABLE dead_letters (
    recv_ts  TIMESTAMP NOT NULL,
    subject  VARCHAR NOT NULL,
    reason   VARCHAR NOT NULL,
    detail   VARCHAR NOT NULL,
    msg_id   VARCHAR,
    size     BIGINT NOT NULL,
    payload  BLOB NOT NULL
);

CREATE TABLE alerts (
    fingerprint VARCHAR NOT NULL,
    rule        VARCHAR NOT NULL,
    severity    VARCHAR NOT NULL,
    state       VARCHAR NOT NULL,      -- firing | resolved: one row per transition
    cluster     VARCHAR NOT NULL,
    node        VARCHAR,
    job         VARCHAR,
    comm        VARCHAR,
    rank        BIGINT,
    summary     VARCHAR NOT NULL,
    evidence    JSON,
    started_at  TIMESTAMP NOT NULL,
    resolved_at TIMESTAMP,
    updated_at  TIMESTAMP NOT NULL
);

CREATE TABLE heartbeat (
    cluster VARCHAR NOT NULL, node VARCHAR NOT NULL, agent VARCHAR NOT NULL, seq BIGINT NOT NULL,
    ts TIMESTAMP NOT NULL, recv_ts TIMESTAMP NOT NULL, ttl DOUBLE NOT NULL,
    hostname    VARCHAR,
    version     VARCHAR,
    pid         BIGINT,
    started_ns  BIGINT,
    collectors  JSON,
    publisher   JSON
);
