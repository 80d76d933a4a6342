"""The one collector registry: name -> class. Adding a collector is one module and one line here.

Each name is also its config section (``[agent.collectors.<name>]``) and its health entry.
"""

from __future__ import annotations

from ranksight.agent.collectors.app import AppCollector
from ranksight.agent.collectors.base import Collector
from ranksight.agent.collectors.gpu.collector import GpuCollector
from ranksight.agent.collectors.gpu_probe import GpuProbeCollector
from ranksight.agent.collectors.heartbeat import HeartbeatCollector
from ranksight.agent.collectors.inspector.collector import InspectorCollector
from ranksight.agent.collectors.nic.collector import NicCollector
from ranksight.agent.collectors.probe import ProbeCollector
from ranksight.agent.collectors.ras.collector import RasCollector
from ranksight.agent.collectors.xid import XidCollector

COLLECTORS: dict[str, type[Collector]] = {
    "heartbeat": HeartbeatCollector,
    "ras": RasCollector,
    "inspector": InspectorCollector,
    "gpu": GpuCollector,
    "nic": NicCollector,
    "probe": ProbeCollector,
    "gpu_probe": GpuProbeCollector,
    "app": AppCollector,
    "xid": XidCollector,
}
