"""The alert payload published on ``<prefix>.alert.<cluster>.<severity>.<rule>`` (JSON) and stored in history, and
the silences (maintenance windows) that mute matching alerts."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Severity = Literal["info", "warning", "critical"]
AlertState = Literal["firing", "resolved"]
# The labels an alert is matched and routed by (silences, Alertmanager); each is an Alert field.
LABELS = ("rule", "severity", "cluster", "node", "job", "entity")


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
    entity: str | None = None  # what on the node: "gpu 2", "nic mlx5_0", "comm 3f2a", "link a->b", "pid 1234"
    summary: str
    evidence: dict[str, Any] = {}
    started_at: str
    resolved_at: str | None = None
    updated_at: str
    silenced_by: list[str] = []  # ids of the silences that matched at this transition (not published on NATS)

    def labels(self) -> dict[str, str]:
        """The routing labels that have a value."""
        return {k: str(v) for k in LABELS if (v := getattr(self, k)) is not None}


class Matcher(BaseModel):
    """One label condition, as Alertmanager's: ``name=value``, ``name!=value``, ``name=~regex``, ``name!~regex``."""

    model_config = ConfigDict(extra="forbid")

    name: Literal["rule", "severity", "cluster", "node", "job", "entity"]
    value: str
    is_regex: bool = False
    is_equal: bool = True

    @classmethod
    def parse(cls, text: str) -> Matcher:
        """``rule=nic_errors_rising``, ``node!=n1``, ``node=~gpu-0.*``; ValueError naming the problem otherwise."""
        m = re.fullmatch(r"\s*([a-z_]+)\s*(=~|!~|!=|=)\s*(.*?)\s*", text)
        if m is None:
            raise ValueError(f"not a matcher (NAME=VALUE, !=, =~, !~): {text!r}")
        name, op, value = m.groups()
        if name not in LABELS:
            raise ValueError(f"unknown label {name!r} in matcher {text!r}; labels: {', '.join(LABELS)}")
        if "~" in op:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"bad regular expression in {text!r}: {exc}") from None
        return cls(name=name, value=value, is_regex="~" in op, is_equal=op[0] == "=")  # type: ignore[arg-type]

    def matches(self, labels: dict[str, str]) -> bool:
        have = labels.get(self.name, "")
        hit = re.fullmatch(self.value, have) is not None if self.is_regex else have == self.value
        return hit == self.is_equal

    def __str__(self) -> str:
        return f"{self.name}{'' if self.is_equal else '!'}{'~' if self.is_regex else '='}{self.value}"


class Silence(BaseModel):
    """A maintenance window: alerts matching every matcher between ``starts_at`` and ``ends_at`` are muted."""

    model_config = ConfigDict(extra="ignore")

    id: str
    matchers: list[Matcher] = Field(min_length=1)
    starts_at: str
    ends_at: str
    created_by: str = ""
    comment: str = ""

    def matches(self, alert: Alert) -> bool:
        labels = alert.labels()
        return all(m.matches(labels) for m in self.matchers)
