"""``nic`` collector: RDMA ports and netdevs read from sysfs every interval, with rates from deltas.

Ports and netdevs whose sysfs has no counters (AMD Pollara ``ionic``) get them from ``rdma statistic -j`` / ``ethtool -S``.
A port's record carries every counter at most every ``counters_full_every_s``, in between the changed ones (an ionic
port's ~600 counters, mostly zero and still, were 86 KB a node every interval): those that count trouble in every
record, those that count traffic at most every ``traffic_counters_every_s``.

Absent (not failing) on a node with neither RDMA devices nor physical netdevs under the configured sysfs root.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ranksight.agent.collectors.base import CollectorUnavailable, PolledCollector
from ranksight.agent.collectors.nic.rates import ChangedCounters, RateTracker
from ranksight.agent.collectors.nic.sysfs import read_nics
from ranksight.agent.collectors.nic.tool_counters import fill_missing_counters
from ranksight.schemas.records import Record

if TYPE_CHECKING:
    from ranksight.agent.collectors.nic.settings import NicSettings
    from ranksight.agent.runtime import AgentContext


class NicCollector(PolledCollector):
    name = "nic"
    kind = "nic"
    settings: NicSettings

    def __init__(self, ctx: AgentContext, settings: NicSettings) -> None:
        super().__init__(ctx, settings)
        self.rates = RateTracker()
        self.changes = ChangedCounters(settings.counters_full_every_s, settings.traffic_counters_every_s)

    async def detect(self) -> bool:
        if not await asyncio.to_thread(read_nics, self.settings.sysfs_root, self.settings.netdevs):
            raise CollectorUnavailable(f"no RDMA port or physical netdev under {self.settings.sysfs_root}")
        self.health.source = "sysfs"
        return True

    async def collect(self) -> Sequence[Record]:
        records = await asyncio.to_thread(read_nics, self.settings.sysfs_root, self.settings.netdevs)
        if self.settings.tool_counters:
            records = await fill_missing_counters(records, self.settings.command_timeout_s)
        now = time.monotonic()
        return self.changes.thin(self.rates.update(records, now), now)
