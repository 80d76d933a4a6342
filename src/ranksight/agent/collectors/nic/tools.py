"""Pure parsers of NIC tool output, for devices whose sysfs lacks counters (AMD Pollara ``ionic``, some RoCE drivers).

Faithful to the captured Pollara outputs (ROCm device-metrics-exporter mock data, node-scraper fixtures):
``ethtool -S IF`` ("NIC statistics:" then "     name: value" lines), ``rdma statistic -j`` (a JSON list of
``{"ifname", "port", <counter>: int...}``; byte counters are bytes, not 4-byte words).
"""

from __future__ import annotations

import json
import re
from typing import Any

from ranksight.errors import ParseError
from ranksight.schemas.records import NicRecord


class ToolParseError(ParseError):
    """The output is not what this parser understands."""


_ETHTOOL_LINE = re.compile(r"^\s+([\w.\-\[\]]+):\s+(\d+)\s*$")
# RDMA byte counters of ``rdma statistic`` (ionic names): bytes sent/received, unicast plus multicast
RDMA_TX_BYTES = ("tx_rdma_ucast_bytes", "tx_rdma_mcast_bytes")
RDMA_RX_BYTES = ("rx_rdma_ucast_bytes", "rx_rdma_mcast_bytes")
RDMA_TX_PACKETS = ("tx_rdma_ucast_pkts", "tx_rdma_mcast_pkts")
RDMA_RX_PACKETS = ("rx_rdma_ucast_pkts", "rx_rdma_mcast_pkts")


def _sum(counters: dict[str, int], keys: tuple[str, ...]) -> int | None:
    values = [counters[k] for k in keys if k in counters]
    return sum(values) if values else None


def _json(data: bytes, what: str) -> Any:
    try:
        return json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ToolParseError(f"{what}: not JSON ({exc})") from None


def parse_ethtool_stats(data: bytes, name: str) -> NicRecord:
    """``ethtool -S NAME`` -> a netdev record carrying every counter."""
    lines = data.decode("utf-8", "replace").splitlines()
    if not lines or lines[0].strip() != "NIC statistics:":
        raise ToolParseError(f"ethtool -S {name}: no 'NIC statistics:' header")
    counters = {m.group(1): int(m.group(2)) for m in map(_ETHTOOL_LINE.match, lines[1:]) if m}
    if not counters:
        raise ToolParseError(f"ethtool -S {name}: no counters")
    return NicRecord(
        name=name, kind="netdev", counters=counters,
        tx_bytes=counters.get("tx_bytes"), rx_bytes=counters.get("rx_bytes"),
        tx_packets=counters.get("tx_packets"), rx_packets=counters.get("rx_packets"),
    )  # fmt: skip


def parse_rdma_statistic(data: bytes) -> list[NicRecord]:
    """``rdma statistic -j`` -> one RDMA port record ("ionic_0/1") per entry, counters as given (bytes are bytes)."""
    document = _json(data, "rdma statistic -j")
    if not isinstance(document, list):
        raise ToolParseError("rdma statistic -j: expected a JSON list of ports")
    records = []
    for entry in document:
        if not isinstance(entry, dict) or "ifname" not in entry or "port" not in entry:
            raise ToolParseError(f"rdma statistic -j: entry without ifname/port: {str(entry)[:80]}")
        counters = {
            k: v for k, v in entry.items() if isinstance(v, int) and not isinstance(v, bool) and k != "port"
        }
        records.append(NicRecord(
            name=f"{entry['ifname']}/{entry['port']}", kind="rdma", counters=counters,
            tx_bytes=_sum(counters, RDMA_TX_BYTES), rx_bytes=_sum(counters, RDMA_RX_BYTES),
            tx_packets=_sum(counters, RDMA_TX_PACKETS), rx_packets=_sum(counters, RDMA_RX_PACKETS),
        ))  # fmt: skip
    return records
