-- Diagnosis v2: what each finding costs the job, and how intermittent it is.
ALTER TABLE straggler_finding_history ADD COLUMN cost DOUBLE;
ALTER TABLE straggler_finding_history ADD COLUMN duty_cycle DOUBLE;
ALTER TABLE straggler_finding_history ADD COLUMN burst_slowdown DOUBLE;
ALTER TABLE straggler_finding_history ADD COLUMN lateness_z DOUBLE;
