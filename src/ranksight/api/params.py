"""The parameters of every query endpoint: what a request may carry (unknown keys are refused), the one validation
that the NATS body, the HTTP query string and the command-line flags share. Handlers take them as validated models.
"""

from __future__ import annotations

import datetime
from typing import Literal

from pydantic import Field, field_validator

from ranksight.api.contract import Params

# The one health vocabulary, best to worst (what each word means for a node, a job, a GPU:
# :mod:`ranksight.aggregator.api.health`); what a node is doing is its state, never a health word.
Health = Literal["ok", "warning", "critical"]
HEALTH_WORDS: tuple[Health, ...] = ("ok", "warning", "critical")
NodeStateWord = Literal["alive", "stale", "gone", "drained"]
# The metrics of the ``series`` endpoint; the aggregator declares each one's query (aggregator.api.views.SERIES, which
# tests/unit/test_endpoint_registry.py checks against this list).
SeriesMetric = Literal["step_time_s", "step_period_s", "busbw_gbs", "lateness_us", "gpu_utilization_pct", "gpu_clock_hz", "gpu_power_w",
                       "gpu_temperature_c", "gpu_memory_used_bytes", "gpu_ecc_uncorrectable", "nic_rate_bps",
                       "nic_errors_per_s", "nic_link_flaps"]  # fmt: skip
MARKERS_MAX_LIMIT = 10_000


class StatusParams(Params):
    cluster: str | None = None


class NodesParams(Params):
    cluster: str | None = None
    node: str | None = None
    state: NodeStateWord | None = Field(
        None, description="alive, stale, gone, or drained (expected to be silent)"
    )
    health: Health | None = Field(
        None, description="ok, warning or critical: the worst of its state, its firing alerts and its GPUs"
    )


class AlertsParams(Params):
    state: Literal["firing", "resolved", "all"] = Field(
        "firing", description="firing: live; else from history"
    )
    cluster: str | None = None
    rule: str | None = None
    severity: Literal["info", "warning", "critical"] | None = None
    node: str | None = None
    since: datetime.datetime | None = Field(None, description="history only: transitions at or after this")
    limit: int = Field(1000, ge=1, le=100_000)
    lifecycle: bool = Field(
        False,
        description="firing: also the job lifecycle events (job_started, job_ended), which are not alerts",
    )


class SqlParams(Params):
    sql: str = Field(min_length=1)
    max_rows: int | None = Field(None, ge=1, description="at most the aggregator's sql_max_rows")
    time_limit_s: float | None = Field(None, gt=0, description="at most the aggregator's sql_time_limit_s")
    shards: bool = Field(
        False,
        description="over every shard's Parquet export (aggregator.shards.export_dir) instead of this aggregator's "
        "database",
    )

    @field_validator("sql")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be blank")
        return value


class ExportParams(Params):
    since: datetime.datetime
    until: datetime.datetime
    dir: str = Field(
        min_length=1,
        description="folder on the aggregator's host: relative to, or absolute under, the export root",
    )


class JobParams(Params):
    cluster: str | None = None
    job: str | None = None


class DrainParams(Params):
    nodes: list[str] = Field(min_length=1, max_length=100_000)
    cluster: str | None = Field(None, description="default: the aggregator's cluster")
    undrain: bool = Field(False, description="end the drain: the node's silence alerts again")
    reason: str = Field("", max_length=1000)


class DrainsParams(Params):
    cluster: str | None = None


class SilenceAddParams(Params):
    matchers: list[str] = Field(min_length=1, description="NAME=VALUE, NAME!=VALUE, NAME=~REGEX, NAME!~REGEX")
    duration_s: float | None = Field(
        None, gt=0, le=366 * 86400, description="from starts_at; or give ends_at"
    )
    starts_at: datetime.datetime | None = Field(None, description="default: now")
    ends_at: datetime.datetime | None = None
    comment: str = Field("", max_length=1000)
    created_by: str = Field("", max_length=200, description="who (the CLI sends the user name)")


class SilenceExpireParams(Params):
    id: str = Field(min_length=1)


class SilencesParams(Params):
    state: Literal["active", "all"] = Field(
        "active", description="active: active and pending; all: also expired"
    )


class IncidentsParams(Params):
    since: datetime.datetime | None = Field(
        None, description="incidents that fired or resolved at or after this"
    )
    cluster: str | None = None
    rule: str | None = None
    node: str | None = None
    limit: int = Field(1000, ge=1, le=100_000)


class MarkersParams(Params):
    job: str | None = None
    cluster: str | None = None
    limit: int = Field(1000, ge=1, le=MARKERS_MAX_LIMIT)


class SeriesParams(Params):
    metric: SeriesMetric = Field(description="which series")
    cluster: str | None = None
    job: str | None = Field(None, description="a job id; for GPU and NIC series, the nodes it runs on")
    node: str | None = Field(None, description="a node, or several separated by commas")
    since: datetime.datetime | None = Field(None, description="default: until minus 15 minutes")
    until: datetime.datetime | None = Field(None, description="default: now")
    points: int = Field(120, ge=2, description="buckets at most (capped by series_max_points)")


class ActionPlanParams(Params):
    cluster: str | None = None


class ActionsParams(Params):
    cluster: str | None = None
    status: str | None = Field(
        None, description="only actions in this status (done, failed, awaiting_approval, ...)"
    )
    limit: int = Field(1000, ge=1, le=100_000)


class ActionAuditParams(Params):
    id: str | None = Field(None, description="one action's steps; default: every action's")
    limit: int | None = Field(None, ge=1, description="at most aggregator.actions.max_audit_rows")


class ActionDecisionParams(Params):
    id: str = Field(min_length=1, max_length=64)
    who: str = Field("", max_length=200, description="who (the CLI sends the user name)")


class ActionUndoParams(ActionDecisionParams):
    reason: str = Field("", max_length=1000)


class JobDumpParams(Params):
    job: str
    cluster: str | None = None
    include_dumps: bool = False
