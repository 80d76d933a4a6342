-- Alerting (issue 18): where an alert is (entity), which silences muted a transition, silences and node drains.
ALTER TABLE alerts ADD COLUMN entity VARCHAR;
ALTER TABLE alerts ADD COLUMN silenced_by JSON;

CREATE OR REPLACE VIEW alert_history AS
SELECT
    updated_at, state, rule, severity, cluster, node, job, comm, rank, entity, summary, evidence, fingerprint,
    started_at, resolved_at,
    CASE WHEN resolved_at IS NOT NULL THEN epoch(resolved_at - started_at) END AS duration_s,
    silenced_by
FROM alerts;

-- Maintenance windows: one row per silence; expiring one early sets ends_at to the time it was expired.
CREATE TABLE silences (
    id          VARCHAR PRIMARY KEY,
    matchers    JSON NOT NULL,          -- [{"name", "value", "is_regex", "is_equal"}]
    starts_at   TIMESTAMP NOT NULL,
    ends_at     TIMESTAMP NOT NULL,
    created_by  VARCHAR NOT NULL,
    comment     VARCHAR NOT NULL,
    created_at  TIMESTAMP NOT NULL
);

-- Planned changes: one row per drain or undrain of a node; the latest row per node says whether it is drained.
CREATE TABLE node_drains (
    cluster  VARCHAR NOT NULL,
    node     VARCHAR NOT NULL,
    drained  BOOLEAN NOT NULL,
    changed_at TIMESTAMP NOT NULL,
    reason   VARCHAR NOT NULL
);
