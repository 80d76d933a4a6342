"""The Slurm prolog's job files: written by the real ``deploy/slurm/prolog.sh``, read by the agent's heartbeat."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from ranksight.agent.collectors.slurm_jobs import parse_job_file, read_jobs
from tests.conftest import REPO

SLURM = REPO / "deploy" / "slurm"


def _prolog(jobs_dir: Path, **env: str) -> None:
    base = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    subprocess.run(["sh", str(SLURM / "prolog.sh")], env={**base, "RANKSIGHT_JOBS_DIR": str(jobs_dir), **env},
                   check=True, timeout=30)  # fmt: skip


def test_the_agent_reads_what_the_prolog_writes_and_forgets_what_the_epilog_removes(tmp_path: Path) -> None:
    jobs_dir = tmp_path / "jobs"
    _prolog(jobs_dir, SLURM_JOB_ID="4711", SLURM_JOB_USER="alice", SLURM_JOB_NODELIST="gpu[001-004]")
    _prolog(jobs_dir, SLURM_JOB_ID="4712")
    jobs = {j.job: j for j in read_jobs(jobs_dir, max_jobs=10)}
    assert set(jobs) == {"4711", "4712"}
    assert (jobs["4711"].user, jobs["4711"].nodes) == ("alice", "gpu[001-004]")
    assert jobs["4711"].started_ns and jobs["4712"].user is None
    base = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    subprocess.run(["sh", str(SLURM / "epilog.sh")], env={**base, "RANKSIGHT_JOBS_DIR": str(jobs_dir),
                   "SLURM_JOB_ID": "4711"}, check=True, timeout=30)  # fmt: skip
    assert [j.job for j in read_jobs(jobs_dir, max_jobs=10)] == ["4712"]


def test_bounded_and_forgiving(tmp_path: Path) -> None:
    assert read_jobs(tmp_path / "missing", max_jobs=10) == []
    for i in range(5):
        (tmp_path / f"{i}.env").write_text(f"SLURM_JOB_ID={i}\nSTARTED=soon\n")
    (tmp_path / "junk.env").write_bytes(b"\xff\xfe not a job file")
    assert len(read_jobs(tmp_path, max_jobs=3)) <= 3  # at most max_jobs files are read
    assert sorted(j.job for j in read_jobs(tmp_path, max_jobs=10)) == [
        "0",
        "1",
        "2",
        "3",
        "4",
    ]  # junk skipped
    assert parse_job_file("no job here\nSLURM_JOB_USER=bob\n") is None
    job = parse_job_file("SLURM_JOB_ID=9\nSTARTED=soon\nEXTRA=1\n")
    assert job is not None and job.started_ns is None
