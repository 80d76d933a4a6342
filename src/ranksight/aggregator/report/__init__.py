"""Per-job reports: one self-contained HTML file per job from the history (:mod:`.data` collects, :mod:`.page`
renders). Served at ``/reports/<job>.html`` (rendered when asked), written to ``<state_dir>/reports`` at each job's
end, and made offline by ``ranksight report JOB --db FILE``."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ranksight.aggregator.component_settings import ReportSettings
from ranksight.aggregator.report.data import JobNotFound, collect
from ranksight.aggregator.report.page import render

if TYPE_CHECKING:
    from ranksight.aggregator.api.sql import SqlSandbox

__all__ = ["JobNotFound", "job_report", "report_file", "write_report"]


async def job_report(sandbox: SqlSandbox, settings: ReportSettings, job: str, cluster: str | None = None,
                     time_limit_s: float | None = None) -> str:  # fmt: skip
    """The HTML report of ``job``, read on a sandbox reader cursor (never the writer); :class:`JobNotFound`."""
    data = await sandbox.run(collect, job, cluster, settings, time.time(), time_limit_s=time_limit_s)
    return render(data)


def report_file(directory: Path, job: str) -> Path:
    """Where a job's report is kept: its id made a safe file name."""
    return directory / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', job)[:200]}.html"


def write_report(directory: Path, job: str, text: str, keep: int) -> Path:
    """Write the report (0600, whole or not at all) and keep only the ``keep`` newest reports."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = report_file(directory, job)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.chmod(0o600)
    tmp.replace(path)
    reports = sorted(directory.glob("*.html"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in reports[keep:]:
        old.unlink(missing_ok=True)
    return path
