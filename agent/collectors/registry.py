"""The one collector registry: name -> class. Adding a collector is one module and one line here.

Each name is also its config section (``[agent.collectors.<name>]``) and its health entry.
"""

from __future__ import annotations

from agent.collectors.app import AppCollector
from agent.collectors.base import Collector
from agent.collectors.heartbeat import HeartbeatCollector

COLLECTORS: dict[str, type[Collector]] = {
    "heartbeat": HeartbeatCollector,
    "app": AppCollector,
}
