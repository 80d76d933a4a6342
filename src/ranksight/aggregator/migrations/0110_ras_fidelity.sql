-- Issue 16: which job-level facts a status carries, and MONITOR events' NVML devices and unknown-peer addresses.

ALTER TABLE ras ADD COLUMN job_sections BOOLEAN;    -- false: JSON, which has no job-level INCOMPLETE/DEAD sections
ALTER TABLE ras ADD COLUMN all_communicators BOOLEAN;  -- false: text, which lists only flagged communicators
ALTER TABLE ras_event ADD COLUMN nvml_gpus JSON;   -- the " (NVML n)" suffix / nvml_devs
ALTER TABLE ras_event ADD COLUMN addr VARCHAR;     -- a peer the server cannot name, e.g. 10.9.9.9<1234>
