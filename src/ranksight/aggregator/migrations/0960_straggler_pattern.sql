-- Steady / intermittent / undetermined and the resolution it was judged at (a finding's coverage stays in its
-- evidence and the live answer).
ALTER TABLE straggler_finding_history ADD COLUMN pattern VARCHAR;
ALTER TABLE straggler_finding_history ADD COLUMN pattern_resolution_s DOUBLE;
