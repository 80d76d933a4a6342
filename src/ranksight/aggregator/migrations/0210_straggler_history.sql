-- Every online straggler evaluation's findings (one row per finding per evaluation), beside the alert lifecycle
-- that the straggler_findings view shows. Rows go with the retention of the other history.
CREATE TABLE straggler_finding_history (
    evaluated_at  TIMESTAMP NOT NULL,
    cluster       VARCHAR NOT NULL,
    capture_model VARCHAR,
    records       BIGINT,
    hostname      VARCHAR NOT NULL,
    pid           BIGINT,
    kind          VARCHAR NOT NULL,   -- compute | communication
    comm          VARCHAR,
    rank          BIGINT,
    slowdown      DOUBLE,
    confidence    DOUBLE,
    evidence      VARCHAR,
    recv_ts       TIMESTAMP DEFAULT current_timestamp   -- for retention, like every event table
);
