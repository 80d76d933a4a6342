"""The scheduler-exclusion artifact nvidia-resiliency-ext reads before a rendezvous (NVRx 0.7, "Scheduler Exclusion").

Format, as NVRx's consumer (``fault_tolerance/scheduler_exclusion.py``) and its service's writer define it:
``<dir>/scheduler_exclusion.<job id>.jsonl``, the job id being the Slurm array job's (else the job's). The first line is
a compact JSON array of the excluded array-task ids as strings, without whitespace (the consumer checks it against
``[("<digits>"(,"<digits>")*)?]`` and searches it for ``"<task id>"``); then a ``decision`` record of scope
``array_task`` (``excluded_array_tasks``: ``task_id``, ``restart_count``, ``valid_until``), one of scope ``node``
(``excluded_nodes``: ``node``, ``valid_until``), and one ``observation`` record per node (``node``, ``state``,
``reason``, ``observed_at``, ``valid_until``, ``array_tasks``). Times are ISO-8601 UTC with ``Z``. The consumer takes
the file's mtime as its freshness and fails open after 30 minutes, so the file is rewritten on every change, and
replaced atomically (a temporary file in the same directory, fsync, rename): a reader never sees half a file.

A ranksight job id ``<array job>_<task>`` (Slurm's name for an array task) maps to that array job's file and task; a
plain job id excludes the node only (NVRx's node-scoped decision).
"""

from __future__ import annotations

import datetime
import json
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_ARRAY_TASK = re.compile(r"^(\d+)_(\d+)$")
_JOB = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")


@dataclass(frozen=True)
class Observation:
    node: str
    reason: str
    observed_at: float  # seconds since the epoch
    array_tasks: tuple[str, ...]  # task ids of the job this node excludes


def job_and_task(job: str) -> tuple[str, str | None]:
    """``"1234_7"`` -> ``("1234", "7")`` (an array task); ``"1234"`` -> ``("1234", None)``."""
    m = _ARRAY_TASK.match(job)
    return (m.group(1), m.group(2)) if m else (job, None)


def artifact_path(directory: Path, job: str) -> Path:
    if not _JOB.match(job) or job in {".", ".."}:
        raise ValueError(f"not a Slurm job id: {job!r}")
    return directory / f"scheduler_exclusion.{job}.jsonl"


def _iso(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _seconds(text: str) -> float:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _task_order(task: str) -> tuple[int, str]:
    return (int(task), task) if task.isdigit() else (1 << 62, task)


def render(job: str, observations: list[Observation], valid_s: float, now: float) -> bytes:
    """The artifact's bytes for ``observations`` (one per excluded node) of ``job``."""
    tasks: dict[str, float] = {}
    for o in observations:
        for task in o.array_tasks:
            tasks[task] = max(tasks.get(task, 0.0), o.observed_at + valid_s)
    ordered = sorted(tasks, key=_task_order)
    common = {"type": "decision", "schema_version": 1, "job_id": job, "generated_at": _iso(now)}
    records: list[Any] = [
        ordered,
        {**common, "scope": "array_task", "excluded_array_tasks": [
            {"task_id": t, "restart_count": 0, "valid_until": _iso(tasks[t])} for t in ordered]},
        {**common, "scope": "node", "excluded_nodes": [
            {"node": o.node, "valid_until": _iso(o.observed_at + valid_s)}
            for o in sorted(observations, key=lambda o: o.node)]},
    ]  # fmt: skip
    for o in sorted(observations, key=lambda o: o.node):
        records.append({"type": "observation", "node": o.node, "state": "DRAIN", "reason": o.reason,
                        "observed_at": _iso(o.observed_at), "valid_until": _iso(o.observed_at + valid_s),
                        "array_tasks": [{"task_id": t, "restart_count": 0}
                                        for t in sorted(o.array_tasks, key=_task_order)]})  # fmt: skip
    return b"".join(json.dumps(r, separators=(",", ":")).encode() + b"\n" for r in records)


def read_observations(data: bytes) -> list[Observation]:
    """The observation records of an artifact this module wrote (to change it and write it again)."""
    found = []
    for line in data.splitlines()[1:]:
        record = json.loads(line)
        if record.get("type") == "observation":
            found.append(Observation(record["node"], record["reason"], _seconds(record["observed_at"]),
                                     tuple(t["task_id"] for t in record["array_tasks"])))  # fmt: skip
    return found


def write_atomically(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def update(
    directory: Path, job: str, node: str, reason: str, exclude: bool, valid_s: float, now: float
) -> Path:
    """Add (``exclude``) or remove ``node`` in the artifact of ``job``'s array job; the file is rewritten atomically
    either way (which also renews its freshness). Observations older than ``valid_s`` are dropped."""
    array_job, task = job_and_task(job)
    path = artifact_path(directory, array_job)
    try:
        kept = [
            o
            for o in read_observations(path.read_bytes())
            if o.node != node and o.observed_at + valid_s > now
        ]
    except FileNotFoundError:
        kept = []
    if exclude:
        kept.append(Observation(node, reason, now, (task,) if task is not None else ()))
    write_atomically(path, render(array_job, kept, valid_s, now))
    return path
