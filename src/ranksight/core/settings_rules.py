"""What settings derive from their values, declared once for both forms: the pydantic settings (:mod:`ranksight.core.config`)
and their twins that the agent process reads (:mod:`ranksight.core.settings_twins`) inherit these classes."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from ranksight.core.secret import Secret

if TYPE_CHECKING:
    from ranksight.core import settings_twins


class CollectorSection:
    """What every collector's section has, and its facts' lifetime."""

    __slots__ = ()
    enabled: bool
    interval_s: float
    ttl_s: float | None

    def ttl(self) -> float:
        return self.ttl_s if self.ttl_s is not None else 3 * self.interval_s


class SummaryTiming:
    __slots__ = ()
    summary_window_s: float
    summary_publish_s: float

    def summary_ttl(self) -> float:
        """A summary stays valid until the next window's should have come."""
        return 2 * self.summary_window_s + self.summary_publish_s


class StatePaths:
    __slots__ = ()
    state_dir: Path
    agent: Any  # the agent section, of either form

    def app_socket_path(self) -> Path:
        """Scoped to this instance: another agent's training processes (another state dir) never reach it."""
        return self.agent.collectors.app.socket_path or self.state_dir / "app.sock"


def _decode_value(kind: type, value: object) -> object:
    if kind is Path and isinstance(value, str):
        return Path(value)
    if kind is Secret and isinstance(value, str):
        return Secret(value)
    raise NotImplementedError(f"no {kind.__name__} from {type(value).__name__}")


def decode_settings(data: bytes) -> settings_twins.Settings:
    """The twin of validated settings from their JSON (:func:`ranksight.core.config.encode_settings`)."""
    from ranksight.core import settings_twins  # which imports this module's classes

    return msgspec.json.decode(data, type=settings_twins.Settings, dec_hook=_decode_value)
