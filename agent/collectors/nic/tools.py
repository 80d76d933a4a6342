"""Pure parsers of NIC tool output, for devices whose sysfs lacks counters (AMD Pollara ``ionic``, some RoCE drivers).

Faithful to the captured Pollara outputs (ROCm device-metrics-exporter mock data, node-scraper fixtures):
``ethtool -S IF`` ("NIC statistics:" then "     name: value" lines), ``rdma statistic -j`` (a JSON list of
``{"ifname", "port", <counter>: int...}``; byte counters are bytes, not 4-byte words), ``rdma link`` in text
("link rocep68s0/1 state ACTIVE physical_state LINK_UP netdev enp68s0") and ``-j`` form, ``ip link show``, and
``nicctl show {port|lif} statistics [--rate] -j`` (``{"nic": [{"id", "port"|"lif": [{"spec": {"id"}, "statistics":
{name: "string"}}]}]}``, counters as decimal strings, rates as "33.16 Gbps" / "3.83 Mpps").
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from ranksight.errors import ParseError
from schemas.records import NicRecord


class ToolParseError(ParseError):
    """The output is not what this parser understands."""


_ETHTOOL_LINE = re.compile(r"^\s+([\w.\-\[\]]+):\s+(\d+)\s*$")
_RDMA_LINK = re.compile(
    r"^link\s+(?P<name>\S+)\s+state\s+(?P<state>\S+)\s+physical_state\s+(?P<phys>\S+)(?:\s+netdev\s+(?P<netdev>\S+))?"
)
_IP_LINK = re.compile(r"^\d+:\s+(?P<name>[^:@\s]+)(?:@\S+)?:\s+<(?P<flags>[^>]*)>(?P<rest>.*)$")
_RATE = re.compile(r"^\s*([\d.]+)\s*([KMGT]?)(bps|pps)\s*$")
_SI = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
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


@dataclass(frozen=True)
class RdmaLink:
    name: str  # "<device>/<port>", as the NIC records name RDMA ports
    state: str
    phys_state: str
    netdev: str | None


def parse_rdma_link(data: bytes) -> list[RdmaLink]:
    """``rdma link`` (text) or ``rdma link -j`` -> the port states and netdevs."""
    text = data.decode("utf-8", "replace")
    if text.lstrip().startswith("["):
        entries = _json(data, "rdma link -j")
        try:
            return [RdmaLink(f"{e['ifname']}/{e['port']}", e["state"], e["physical_state"], e.get("netdev"))
                    for e in entries]  # fmt: skip
        except (KeyError, TypeError) as exc:
            raise ToolParseError(f"rdma link -j: entry without {exc}") from None
    links = []
    for line in filter(str.strip, text.splitlines()):
        match = _RDMA_LINK.match(line.strip())
        if match is None:
            raise ToolParseError(f"rdma link: unexpected line {line[:80]!r}")
        links.append(RdmaLink(match["name"], match["state"], match["phys"], match["netdev"]))
    return links


@dataclass(frozen=True)
class IpLink:
    name: str
    state: str | None
    mtu: int | None
    flags: list[str] = field(default_factory=list)

    @property
    def carrier(self) -> bool:
        return "LOWER_UP" in self.flags


def parse_ip_link(data: bytes) -> list[IpLink]:
    """``ip link show [IF]`` -> name, operstate, MTU and flags of each interface line."""
    links = []
    for line in data.decode("utf-8", "replace").splitlines():
        match = _IP_LINK.match(line)
        if match is None:
            continue  # "link/ether ..." and "vf N ..." continuation lines
        rest = match["rest"].split()
        attrs = dict(zip(rest[::2], rest[1::2], strict=False))
        mtu = attrs.get("mtu")
        links.append(IpLink(match["name"], attrs.get("state"), int(mtu) if mtu and mtu.isdigit() else None,
                            match["flags"].split(",")))  # fmt: skip
    if not links:
        raise ToolParseError("ip link show: no interface line")
    return links


@dataclass(frozen=True)
class NicctlStatistics:
    card: str
    id: str  # the port or LIF id
    values: dict[str, float]


def _nicctl_value(name: str, text: str) -> float:
    if text.isdigit():
        return int(text)
    match = _RATE.match(text)
    if match is None:
        raise ToolParseError(f"nicctl: {name} = {text!r} is neither a count nor a rate")
    return float(match.group(1)) * _SI[match.group(2)]


def parse_nicctl_statistics(data: bytes, section: str = "port") -> list[NicctlStatistics]:
    """``nicctl show {port|lif} statistics [--rate] -j`` -> counters (ints) or rates (bits or packets per second)."""
    document = _json(data, f"nicctl show {section} statistics")
    if not isinstance(document, dict) or not isinstance(document.get("nic"), list):
        raise ToolParseError(f"nicctl show {section} statistics: no 'nic' list")
    out = []
    for card in document["nic"]:
        for item in card.get(section, []):
            stats = item.get("statistics", {})
            out.append(NicctlStatistics(card["id"], item["spec"]["id"],
                                        {k: _nicctl_value(k, str(v)) for k, v in stats.items()}))  # fmt: skip
    return out
