-- probe.src_stall_share / dst_stall_share: the share of a bandwidth measurement each end's probe loop was stalled (busy
-- or starved of CPU); link_history shows them beside the rates.
ALTER TABLE probe ADD COLUMN src_stall_share DOUBLE;
ALTER TABLE probe ADD COLUMN dst_stall_share DOUBLE;

CREATE OR REPLACE VIEW link_history AS
SELECT cluster, src, dst, transport, dst_addr, mode,
       upload_bps, download_bps, rtt_us, jitter_us, bytes, duration_s, skipped, error, src_stall_share, dst_stall_share,
       recv_ts AS measured, recv_ts + to_microseconds(CAST(ttl * 1e6 AS BIGINT)) AS expires
FROM probe;
