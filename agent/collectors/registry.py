"""The one collector registry: name -> class. Adding a collector is one module and one line here.

Each name is also its config section (``[agent.collectors.<name>]``) and its health entry.
"""

from __future__ import annotations

from agent.collectors.base import Collector
from agent.collectors.heartbeat import HeartbeatCollector
from agent.collectors.inspector.collector import InspectorCollector

COLLECTORS: dict[str, type[Collector]] = {
    "heartbeat": HeartbeatCollector,
    "inspector": InspectorCollector,
}
