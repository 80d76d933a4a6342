"""The alert payload published on ``<prefix>.alert.<cluster>.<severity>.<rule>`` (JSON) and stored in history."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

Severity = Literal["info", "warning", "critical"]
AlertState = Literal["firing", "resolved"]


class Alert(BaseModel):
    model_config = ConfigDict(extra="ignore")

    rule: str
    severity: Severity
    fingerprint: str
    state: AlertState
    cluster: str
    node: str | None = None
    job: str | None = None
    comm: str | None = None
    rank: int | None = None
    summary: str
    evidence: dict[str, Any] = {}
    started_at: str
    resolved_at: str | None = None
    updated_at: str
