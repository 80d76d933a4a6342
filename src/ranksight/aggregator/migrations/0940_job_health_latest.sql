-- v_job_health's latest values by (recv_ts, ts, seq): recv_ts is stamped per ingest batch, so two polls of one job that
-- arrive in one batch tie on it and the latest health was either poll's; the agent's poll time, then its sequence,
-- break the tie.
CREATE OR REPLACE VIEW v_job_health AS
SELECT cluster, job_id,
       arg_max(health, (recv_ts, ts, seq))   AS health,
       arg_max(version, (recv_ts, ts, seq))  AS version,
       arg_max(endpoint, (recv_ts, ts, seq)) AS endpoint,
       min(recv_ts)               AS first_poll,
       max(recv_ts)               AS last_poll,
       count(*)                   AS polls,
       count(*) FILTER (WHERE health <> 'ok') AS unhealthy_polls
FROM ras
GROUP BY cluster, job_id;
