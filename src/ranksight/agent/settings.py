"""The agent's settings: ``[agent]``, and :class:`AgentView`, what the agent process holds."""

from __future__ import annotations

import socket
from pathlib import Path

from pydantic import Field

from ranksight.agent.collectors.settings import CollectorsSettings
from ranksight.core.config import CommonSettings, Section
from ranksight.schemas.subjects import sanitize_token
from ranksight.schemas.wire import WireFormat


class AgentSettings(Section):
    node: str = Field(
        default_factory=lambda: sanitize_token(socket.gethostname()),
        description="node name, a subject token ([A-Za-z0-9_-]); default: the hostname, dots as '_'",
    )
    batch_max_records: int = Field(2000, ge=1)
    batch_max_bytes: int = Field(512 * 1024, ge=1024, description="keep below the server's max_payload")
    batch_max_delay_s: float = Field(0.25, gt=0)
    wire_format: WireFormat = Field(
        "compact",
        description="record batches as columns (compact), or one map per record (map), which aggregators older than "
        "the compact wire read",
    )
    queue_max_messages: int = Field(10_000, ge=1, description="publisher queue bound; gauges drop beyond it")
    max_inflight: int = Field(512, ge=1, description="unacknowledged JetStream publishes at once")
    publish_timeout_s: float = Field(5.0, gt=0)
    redetect_s: float = Field(
        30.0, gt=0, description="how often an absent collector checks again whether its source has appeared"
    )
    collectors: CollectorsSettings = CollectorsSettings()


class AgentView(CommonSettings):
    """What the agent process reads: the top-level keys and ``[agent]`` (``ranksight agent`` hands it these alone)."""

    agent: AgentSettings = AgentSettings()

    def app_socket_path(self) -> Path:
        """Scoped to this instance: another agent's training processes (another state dir) never reach it."""
        return self.agent.collectors.app.socket_path or self.state_dir / "app.sock"
