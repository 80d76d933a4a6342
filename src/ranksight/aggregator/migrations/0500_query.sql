-- Documented views for the common questions (README "SQL over history"); owners of other areas add theirs.

-- Node state over time: one row per heartbeat, with how long the node then stayed silent. A heartbeat whose
-- silence_s exceeds its ttl marks a period in which the node was stale (or gone).
CREATE VIEW node_timeline AS
SELECT
    cluster, node, agent, hostname, version, ts, recv_ts AS seen_at, ttl,
    recv_ts + to_microseconds(CAST(ttl * 1e6 AS BIGINT)) AS expires_at,
    epoch(lead(recv_ts) OVER w - recv_ts) AS silence_s,
    coalesce(epoch(lead(recv_ts) OVER w - recv_ts) > ttl, FALSE) AS went_stale,
    epoch(ts - recv_ts) AS clock_skew_s
FROM heartbeat
WINDOW w AS (PARTITION BY cluster, node ORDER BY recv_ts);

-- Alert transitions (one row per firing or resolution), with how long a resolved alert was firing.
CREATE VIEW alert_history AS
SELECT
    updated_at, state, rule, severity, cluster, node, job, comm, rank, summary, evidence, fingerprint,
    started_at, resolved_at,
    CASE WHEN resolved_at IS NOT NULL THEN epoch(resolved_at - started_at) END AS duration_s
FROM alerts;

-- The latest state of every alert fingerprint (firing ones are the current alerts).
CREATE VIEW alert_current AS
SELECT * FROM alert_history
QUALIFY row_number() OVER (PARTITION BY fingerprint ORDER BY updated_at DESC, state = 'resolved' DESC) = 1;
