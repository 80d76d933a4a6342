"""Pure reader of RDMA ports and netdevs under a sysfs root into :class:`NicRecord` (raw counters, no rates yet).

Faithful to the kernel's sysfs ABI and the captured procfs fixture tree:
``class/infiniband/<dev>/ports/<n>/{state,phys_state,rate,link_layer}`` ("4: ACTIVE", "5: LinkUp", "100 Gb/sec (4X EDR)"),
``counters/*`` where ``port_xmit_data``/``port_rcv_data`` count 4-byte words, ``hw_counters/*`` (CNP, out-of-sequence...);
``class/net/<if>/{operstate,speed,carrier_changes,statistics/*}`` with ``speed`` in Mb/s (-1 when unknown). Virtual netdevs
(under ``devices/virtual``) and ``lo`` are skipped unless named. Unreadable files are null values, never errors.
"""

from __future__ import annotations

import re
from pathlib import Path

from ranksight.schemas.records import NicRecord

RDMA_WORD_BYTES = 4
_RATE = re.compile(r"^\s*([\d.]+)\s*Gb/sec")


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _state(text: str | None) -> str | None:
    """ "4: ACTIVE" -> "ACTIVE"; plain words pass through."""
    if not text:
        return None
    return text.split(":", 1)[1].strip() if ":" in text else text


def _counters(*dirs: Path) -> dict[str, int]:
    counters: dict[str, int] = {}
    for directory in dirs:
        for path in sorted(directory.iterdir()) if directory.is_dir() else []:
            text = _read(path)
            if text is not None and text.isdigit():
                counters[path.name] = int(text)
    return counters


def _rdma_ports(root: Path) -> list[NicRecord]:
    records = []
    base = root / "class" / "infiniband"
    for device in sorted(base.iterdir()) if base.is_dir() else []:
        ports = device / "ports"
        for port in sorted(ports.iterdir(), key=lambda p: p.name) if ports.is_dir() else []:
            counters = _counters(port / "counters", port / "hw_counters")
            rate = _RATE.match(_read(port / "rate") or "")
            xmit, rcv = counters.get("port_xmit_data"), counters.get("port_rcv_data")
            records.append(NicRecord(
                name=f"{device.name}/{port.name}", kind="rdma",
                state=_state(_read(port / "state")), phys_state=_state(_read(port / "phys_state")),
                link_layer=_read(port / "link_layer"),
                speed_bps=float(rate.group(1)) * 1e9 if rate else None,
                tx_bytes=None if xmit is None else xmit * RDMA_WORD_BYTES,
                rx_bytes=None if rcv is None else rcv * RDMA_WORD_BYTES,
                tx_packets=counters.get("port_xmit_packets"), rx_packets=counters.get("port_rcv_packets"),
                counters=counters,
            ))  # fmt: skip
    return records


def _netdevs(root: Path, names: list[str] | None) -> list[NicRecord]:
    records = []
    base = root / "class" / "net"
    for dev in sorted(base.iterdir()) if base.is_dir() else []:
        if names is not None:
            if dev.name not in names:
                continue
        elif dev.name == "lo" or "/devices/virtual/" in str(dev.resolve()):
            continue
        counters = _counters(dev / "statistics")
        changes = _read(dev / "carrier_changes")
        if changes is not None and changes.isdigit():
            counters["carrier_changes"] = int(changes)
        speed = _read(dev / "speed")
        mbps = int(speed) if speed and speed.lstrip("-").isdigit() else -1
        records.append(NicRecord(
            name=dev.name, kind="netdev", state=_read(dev / "operstate"),
            speed_bps=mbps * 1e6 if mbps > 0 else None,
            tx_bytes=counters.get("tx_bytes"), rx_bytes=counters.get("rx_bytes"),
            tx_packets=counters.get("tx_packets"), rx_packets=counters.get("rx_packets"),
            counters=counters,
        ))  # fmt: skip
    return records


def read_nics(root: Path, netdevs: list[str] | None = None) -> list[NicRecord]:
    """Every RDMA port and (physical or named) netdev under ``root``, which stands for ``/sys``."""
    return _rdma_ports(root) + _netdevs(root, netdevs)
