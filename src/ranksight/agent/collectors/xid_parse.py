"""Pure parsing of kernel log records into Xid events (``gpu_xid`` records).

``/dev/kmsg`` gives one record per read: ``<priority>,<sequence>,<microseconds since boot>,<flags>[,...];<message>``,
then optional continuation lines that start with a space (``SUBSYSTEM=pci`` ...). The NVIDIA driver's lines are
``NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.`` (older drivers print
``pid='<unknown>', name=<unknown>``, no pid or name, or nothing after the code) and, for NVSwitches,
``nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV error``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ranksight.errors import ParseError
from ranksight.schemas.records import GpuXidRecord

MAX_MESSAGE = 1000
_XID = re.compile(
    r"\b(?P<kind>S?Xid) \(PCI:(?P<pci>[0-9A-Fa-f:.]+)\): (?P<code>\d{1,9})(?:, ?(?P<rest>.*))?$"
)
_PID = re.compile(r"^pid=(?:'<unknown>'|<unknown>|'?(?P<pid>\d+)'?), ?")
_NAME = re.compile(r"^name=(?:'<unknown>'|<unknown>|(?P<name>[^,]*)), ?")


class KmsgParseError(ParseError):
    """A /dev/kmsg record without its ``<prefix>;<message>`` form."""


@dataclass(frozen=True)
class KmsgRecord:
    seq: int
    message: str


def parse_kmsg(line: str) -> KmsgRecord:
    head, sep, message = line.partition(";")
    fields = head.split(",")
    if not sep or len(fields) < 3 or not fields[1].isdigit():
        raise KmsgParseError(f"not a kernel log record: {line[:100]!r}")
    return KmsgRecord(int(fields[1]), message.rstrip("\n"))


def parse_xid(message: str, seq: int | None = None) -> GpuXidRecord | None:
    """The Xid event in a kernel log message, or None when it holds none."""
    m = _XID.search(message)
    if m is None:
        return None
    rest, pid, name = m.group("rest") or "", None, None
    if (pm := _PID.match(rest)) is not None:
        pid, rest = (int(pm.group("pid")) if pm.group("pid") else None), rest[pm.end() :]
    if (nm := _NAME.match(rest)) is not None:
        name, rest = nm.group("name") or None, rest[nm.end() :]
    return GpuXidRecord(kind="sxid" if m.group("kind") == "SXid" else "xid", code=int(m.group("code")),
                        pci=m.group("pci"), pid=pid, process=name, message=rest.strip()[:MAX_MESSAGE],
                        kernel_seq=seq)  # fmt: skip


def parse_lines(text: str) -> list[GpuXidRecord]:
    """Every Xid event in kernel log text: /dev/kmsg records, or plain lines (``dmesg``, a journal export)."""
    found = []
    for line in text.splitlines():
        if not line.strip() or line.startswith(" "):  # continuation lines of a kmsg record
            continue
        seq = None
        if re.match(r"^\d+,\d+,\d+,", line):
            record = parse_kmsg(line)
            line, seq = record.message, record.seq
        event = parse_xid(line, seq)
        if event is not None:
            found.append(event)
    return found
