"""Counters from tools for devices whose sysfs has none: ``rdma statistic -j`` for RDMA ports, ``ethtool -S`` for netdevs.

AMD Pollara (``ionic``) ports are the case in point: their traffic, CNP/ECN and retransmit counters are read through
the rdma tool. Tools run off the event loop with a timeout; a missing or failing tool leaves the records as sysfs gave
them (counter-less) rather than failing the collector.
"""

from __future__ import annotations

import msgspec

from ranksight.agent.collectors.command import CommandFailed, run_command
from ranksight.agent.collectors.nic.tools import ToolParseError, parse_ethtool_stats, parse_rdma_statistic
from ranksight.schemas.records import NicRecord

_COUNTER_FIELDS = ("tx_bytes", "rx_bytes", "tx_packets", "rx_packets", "counters")


def _with_counters(record: NicRecord, source: NicRecord) -> NicRecord:
    return msgspec.structs.replace(record, **{f: getattr(source, f) for f in _COUNTER_FIELDS})


async def fill_missing_counters(records: list[NicRecord], timeout_s: float) -> list[NicRecord]:
    """``records`` with tool counters in place of the empty sysfs ones, where a tool gives them."""
    tool: dict[str, NicRecord] = {}
    if any(r.kind == "rdma" and not r.counters for r in records):
        try:
            tool.update((r.name, r) for r in parse_rdma_statistic(
                await run_command(["rdma", "statistic", "-j"], timeout_s)
            ))  # fmt: skip
        except (CommandFailed, ToolParseError):
            pass  # no rdma tool or no statistics: the ports stay counter-less
    for record in records:
        if record.kind == "netdev" and not record.counters:
            try:
                out = await run_command(["ethtool", "-S", record.name], timeout_s)
                tool[record.name] = parse_ethtool_stats(out, record.name)
            except (CommandFailed, ToolParseError):
                continue
    return [
        _with_counters(r, tool[r.name])
        if not r.counters and r.name in tool and r.kind == tool[r.name].kind
        else r
        for r in records
    ]
