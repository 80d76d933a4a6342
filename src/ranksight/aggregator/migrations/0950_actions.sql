-- Acting on findings (issue 44): every step of every action, in order. The latest row of an action id is its status.
CREATE TABLE action_audit (
    id               VARCHAR NOT NULL,    -- the action: policy + alert fingerprint + incident start, hashed
    step_at          TIMESTAMP NOT NULL,
    seq              BIGINT NOT NULL,      -- orders the steps an aggregator wrote within one microsecond
    step             VARCHAR NOT NULL,    -- planned, awaiting_approval, queued, running, retrying, done, failed, ...
    who              VARCHAR NOT NULL,    -- ranksight, or the user who approved, rejected or undid it
    why              VARCHAR NOT NULL,
    result           VARCHAR NOT NULL,
    policy           VARCHAR NOT NULL,
    action           VARCHAR NOT NULL,
    mode             VARCHAR NOT NULL,
    cluster          VARCHAR NOT NULL,
    node             VARCHAR,
    job              VARCHAR,
    rule             VARCHAR NOT NULL,
    severity         VARCHAR NOT NULL,
    fingerprint      VARCHAR NOT NULL,
    incident_started TIMESTAMP NOT NULL,
    summary          VARCHAR NOT NULL,
    attempts         INTEGER NOT NULL,
    detail           JSON
);
