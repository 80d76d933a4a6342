"""What every collector's section has (``[agent.collectors.<name>]``): beside the agent's packages rather than inside
``ranksight.agent.collectors``, since collectors of other packages (``ranksight.agent.gpuprobe``) declare theirs on it.
"""

from __future__ import annotations

from pydantic import Field

from ranksight.core.config import Section


class CollectorSettings(Section):
    """What every collector's section has, and its facts' lifetime."""

    enabled: bool = True
    interval_s: float = Field(5.0, gt=0)
    ttl_s: float | None = Field(None, gt=0, description="fact lifetime; default 3 x interval")

    def ttl(self) -> float:
        return self.ttl_s if self.ttl_s is not None else 3 * self.interval_s
