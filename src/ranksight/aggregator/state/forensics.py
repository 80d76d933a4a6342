"""Hang reports: the cross-rank Flight Recorder match of a job's dumps (:mod:`aggregator.hang_forensics` fills it,
the ``flight_recorder_hang`` rule reads it, or a RAS / Inspector hang alert of the same hang carries it). Kept per (cluster, job) until ``retain_s`` or until the job's ranks named
by the report heartbeat again after the dump (then the hang is over)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ranksight.aggregator.component_settings import HangForensicsSettings
from ranksight.aggregator.forgetting import NodeKey
from ranksight.core.flightrec import HangReport

_DEFAULTS = HangForensicsSettings()


@dataclass
class JobReport:
    cluster: str
    job: str
    collected_ns: int
    report: HangReport
    nodes: dict[int, str]  # rank -> the agent's node it answered through
    errors: list[dict[str, Any]] = field(
        default_factory=list
    )  # processes or agents that gave no dump, and why
    corroboration: dict[int, dict[str, Any]] = field(
        default_factory=dict
    )  # rank -> RAS / Inspector / app view
    raw_dumps: list[dict[str, Any]] = field(
        default_factory=list, repr=False
    )  # as the agents sent them (evidence)
    # process group label -> its RAS communicator, as far as it can be joined (hang_forensics.join_ras_comm)
    ras_comms: dict[str, dict[str, Any]] = field(default_factory=dict)
    processes: dict[int, tuple[str, int]] = field(
        default_factory=dict
    )  # rank -> (host, pid) of the job's processes
    # the comm_hang / collective_hang alert of the same hang whose evidence this report went into ({"rule",
    # "fingerprint"}): that alert is the hang's one alert, flight_recorder_hang stays quiet
    merged_into: dict[str, str] | None = None
    # ranks named one by one, and the most ranks a list in an alert's evidence holds (max_named_ranks)
    max_named: int = _DEFAULTS.max_named_ranks


class ForensicsTracker:
    def __init__(self, retain_s: float = _DEFAULTS.retain_s) -> None:
        self.retain_ns = int(retain_s * 1e9)
        self.reports: dict[tuple[str, str], JobReport] = {}

    def configure(self, settings: HangForensicsSettings) -> None:
        self.retain_ns = int(settings.retain_s * 1e9)

    def put(self, report: JobReport) -> None:
        self.reports[(report.cluster, report.job)] = report

    def drop(self, cluster: str, job: str) -> None:
        self.reports.pop((cluster, job), None)

    def tick(self, now_ns: int) -> None:
        self.reports = {k: r for k, r in self.reports.items() if now_ns - r.collected_ns <= self.retain_ns}

    def forget(self, nodes: set[NodeKey]) -> None:
        self.reports = {
            k: r
            for k, r in self.reports.items()
            if not any((r.cluster, n) in nodes for n in r.nodes.values())
        }
