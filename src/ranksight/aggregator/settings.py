"""The aggregator's settings: ``[aggregator]``, every section of the aggregator composed (each declared beside its
component), and :class:`AggregatorView`, what the aggregator reads.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from pydantic import Field

from ranksight.aggregator.actions.settings import ActionSettings
from ranksight.aggregator.api.settings import QuerySettings
from ranksight.aggregator.component_settings import (
    AlertSettings,
    HangForensicsSettings,
    HardwareAlertSettings,
    ProbePlannerSettings,
    ProfileOnDemandSettings,
    RasAlertSettings,
    RawEvidenceSettings,
    ReportSettings,
    ShardSettings,
)
from ranksight.aggregator.http.settings import HttpSettings
from ranksight.aggregator.ingest.settings import IngestSettings
from ranksight.aggregator.models.straggler.settings import StragglerSettings
from ranksight.api.settings import ApiView
from ranksight.core.config import Section


class AggregatorSettings(Section):
    db_path: Path | None = Field(None, description="DuckDB file; default <state_dir>/ranksight.duckdb")
    stream: str = "RANKSIGHT_EVENTS"
    durable: str = "ranksight-aggregator"
    stream_max_age_s: float = Field(7 * 24 * 3600, gt=0)
    stream_max_bytes: int = Field(10 * 1024**3, gt=0)
    duplicate_window_s: float = Field(300, gt=0)
    fetch_batch: int = Field(1000, ge=1)
    ack_wait_s: float = Field(
        15, gt=0, description="redelivery delay of unacknowledged batches (e.g. after a crash)"
    )
    tick_s: float = Field(1.0, gt=0)
    node_gone_after_s: float = Field(
        300, gt=0, description="a silent node turns from stale to gone after this"
    )
    replay_window_s: float = Field(3600, gt=0, description="history replayed into live state at start")
    retention_days: float = Field(30, gt=0)
    query: QuerySettings = Field(default_factory=QuerySettings)
    ingest: IngestSettings = IngestSettings()
    probes: ProbePlannerSettings = ProbePlannerSettings()
    stragglers: StragglerSettings = StragglerSettings()
    raw_evidence: RawEvidenceSettings = RawEvidenceSettings()
    profile_on_demand: ProfileOnDemandSettings = ProfileOnDemandSettings()
    hang_forensics: HangForensicsSettings = HangForensicsSettings()
    hardware: HardwareAlertSettings = HardwareAlertSettings()
    ras: RasAlertSettings = RasAlertSettings()
    alerts: AlertSettings = AlertSettings()
    http: HttpSettings = HttpSettings()
    shards: ShardSettings = ShardSettings()
    actions: ActionSettings = ActionSettings()
    report: ReportSettings = ReportSettings()


class _RasLease(Protocol):
    @property
    def interval_s(self) -> float: ...
    @property
    def lease_ttl_s(self) -> float | None: ...
    @property
    def lease_bucket_max_bytes(self) -> int: ...


class _AppDumps(Protocol):
    @property
    def dump_max_bytes(self) -> int: ...
    @property
    def dump_max_files(self) -> int: ...


class _AgentCollectors(Protocol):
    @property
    def ras(self) -> _RasLease: ...
    @property
    def app(self) -> _AppDumps: ...


class AgentSide(Protocol):
    """What the aggregator reads of the agents' section (``[agent]``, declared in ``ranksight.agent``, which the
    aggregator does not import): the RAS lease bucket it creates for them, and the dump bounds of
    ``ranksight analyze hang``."""

    @property
    def collectors(self) -> _AgentCollectors: ...


class AggregatorView(ApiView):
    """What the aggregator reads: the top-level keys, ``[aggregator]``, and a little of ``[agent]`` (:class:`AgentSide`),
    which the root provides (:class:`ranksight.settings.Settings`; the type checker holds its ``agent`` to this
    shape)."""

    aggregator: AggregatorSettings = AggregatorSettings()
    if TYPE_CHECKING:
        agent: AgentSide

    def db_path(self) -> Path:
        return self.aggregator.db_path or self.state_dir / "ranksight.duckdb"

    def export_root(self) -> Path:
        return self.aggregator.query.export_root or self.state_dir / "exports"
