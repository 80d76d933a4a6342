"""The one collector registry: name -> class. Adding a collector is one module and one line here.

Each name is also its config section (``[agent.collectors.<name>]``) and its health entry.
"""

from __future__ import annotations

from agent.collectors.app import AppCollector
from agent.collectors.base import Collector
from agent.collectors.gpu.collector import GpuCollector
from agent.collectors.gpu_probe import GpuProbeCollector
from agent.collectors.heartbeat import HeartbeatCollector
from agent.collectors.inspector.collector import InspectorCollector
from agent.collectors.nic.collector import NicCollector
from agent.collectors.probe import ProbeCollector
from agent.collectors.ras.collector import RasCollector

COLLECTORS: dict[str, type[Collector]] = {
    "heartbeat": HeartbeatCollector,
    "ras": RasCollector,
    "inspector": InspectorCollector,
    "gpu": GpuCollector,
    "nic": NicCollector,
    "probe": ProbeCollector,
    "gpu_probe": GpuProbeCollector,
    "app": AppCollector,
}
