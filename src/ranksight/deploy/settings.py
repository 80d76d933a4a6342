"""``ranksight deploy``'s section: ``[deploy]``, and :class:`DeployView`, what the rollout reads."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from ranksight.aggregator.settings import AggregatorView
from ranksight.core.config import Section


class DeploySettings(Section):
    """``ranksight deploy``: how agents are rolled out over SSH (flags override these)."""

    parallel: int = Field(32, ge=1, description="hosts worked on at once")
    remote_dir: str = Field(
        ".local/share/ranksight",
        description="install folder on each node; relative paths are under the login home",
    )
    python: str = Field("python3", description="interpreter on the node that creates the venv")
    system_site_packages: bool = Field(False, description="create the node venv with --system-site-packages")
    pip_options: list[str] = Field(
        default_factory=list, description="extra pip options on the node, e.g. --no-index"
    )
    known_hosts: Path | None = Field(None, description="known_hosts file; default ~/.ssh/known_hosts")
    identity_file: Path | None = Field(None, description="private key; default: ssh-agent and ~/.ssh/id_*")
    connect_timeout_s: float = Field(15, gt=0)
    command_timeout_s: float = Field(600, gt=0, description="limit for one remote command (venv, pip)")
    verify_timeout_s: float = Field(20, gt=0, description="time the new agent has to answer on NATS")


class DeployView(AggregatorView):
    """What ``ranksight deploy`` reads: the aggregator's view (the NATS permissions it writes follow the aggregator's
    stream and shards) and ``[deploy]``."""

    deploy: DeploySettings = DeploySettings()
