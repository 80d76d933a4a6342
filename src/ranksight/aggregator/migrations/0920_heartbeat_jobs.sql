-- heartbeat.jobs: the batch jobs on the node, from the Slurm prolog's files (schemas/records/heartbeat.py SchedulerJob).
ALTER TABLE heartbeat ADD COLUMN jobs JSON;
