"""The batch jobs on this node, from the files the Slurm prolog writes (``deploy/slurm/prolog.sh``):
``<jobs_dir>/<jobid>.env``, ``KEY=value`` lines ``SLURM_JOB_ID``, ``SLURM_JOB_USER``, ``SLURM_JOB_NODELIST``, ``STARTED``
(epoch seconds); the epilog removes the file. The heartbeat carries them, so the aggregator knows which job runs where.
"""

from __future__ import annotations

from pathlib import Path

from ranksight.schemas.records.heartbeat import SchedulerJob

MAX_FILE_BYTES = 64 * 1024  # a job file is a few lines; anything bigger is not one


def parse_job_file(text: str) -> SchedulerJob | None:
    """One prolog file -> its job, or None when it names no job. Unknown keys and malformed lines are ignored."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip()] = value.strip()
    job = values.get("SLURM_JOB_ID")
    if not job:
        return None
    started = values.get("STARTED", "")
    return SchedulerJob(
        job=job,
        user=values.get("SLURM_JOB_USER") or None,
        nodes=values.get("SLURM_JOB_NODELIST") or None,
        started_ns=int(started) * 1_000_000_000 if started.isdigit() else None,
    )


def read_jobs(jobs_dir: Path, max_jobs: int) -> list[SchedulerJob]:
    """The jobs of the newest ``max_jobs`` files in ``jobs_dir`` (no directory: no jobs). Blocking: call off the loop."""
    try:
        files = [(f.stat().st_mtime, f) for f in jobs_dir.glob("*.env") if f.is_file()]
    except OSError:
        return []
    jobs = []
    for _, path in sorted(files, reverse=True)[:max_jobs]:
        try:
            with path.open("rb") as f:
                job = parse_job_file(f.read(MAX_FILE_BYTES).decode("utf-8", "replace"))
        except OSError:  # removed by the epilog meanwhile
            continue
        if job is not None:
            jobs.append(job)
    return jobs
