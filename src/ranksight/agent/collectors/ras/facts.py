"""What the parsers share: hash and GPU-list normalization, and the one health rule.

Health comes from flags and sections (the Errors column, the Errors/Warnings headings, JSON status flags), never from
arithmetic on the table, whose counts were wrong in some releases (pre-2.29.2).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ranksight.agent.collectors.ras.errors import RasParseError
from ranksight.schemas.records.ras import RasProcess

if TYPE_CHECKING:  # a type only: the agent process does not load the pydantic models
    from ranksight.schemas.records.ras import RasHealth

MAX_GPUS = 64  # a process never manages more; bounds range expansion of garbage input
MAX_COUNT = 1 << 24  # counts above this (or negative) are garbage from buggy releases: reported as unknown
MAX_EVIDENCE = 24  # evidence lines kept per process or communicator (a 10k-rank job can list thousands)
_INT = re.compile(r"-?\d+")


def normalize_hash(raw: str) -> str:
    """``3b2fe521bf43bc04`` / ``0x03b2...`` -> ``0x3b2fe521bf43bc04`` (lowercase, no leading zeros)."""
    try:
        return f"0x{int(raw.strip(), 16):x}"
    except ValueError:
        raise RasParseError(f"invalid communicator hash {raw!r}") from None


def normalize_secondary(raw: str) -> str:
    return ":".join(normalize_hash(part) for part in raw.split(":"))


def sane_count(value: int) -> int | None:
    return value if 0 <= value <= MAX_COUNT else None


def parse_gpus(text: str) -> list[int]:
    """GPU lists as printed by RAS: ``5``, ``0,1``, ``0-3``, ``2 (NVML 3)`` -> CUDA device numbers."""
    text = re.sub(r"\(NVML[^)]*\)", "", text)
    gpus: list[int] = []
    for part in re.split(r"[,\s]+", text.strip()):
        lo, sep, hi = part.partition("-")
        if lo.isdigit() and sep and hi.isdigit():
            gpus.extend(range(int(lo), min(int(hi), int(lo) + MAX_GPUS - 1) + 1))
        elif part.isdigit():
            gpus.append(int(part))
        if len(gpus) >= MAX_GPUS:
            break
    return sorted(set(gpus))[:MAX_GPUS]


def add_evidence(into: list[str], line: str) -> None:
    if len(into) < MAX_EVIDENCE and line not in into:
        into.append(line)


def add_process(into: list[RasProcess], host: str, pid: int | None, gpus: list[int], *, comm: str | None = None,
                rank: int | None = None, evidence: Iterable[str] = ()) -> RasProcess:  # fmt: skip
    """Add (or merge into) one process, keyed by host and pid: its GPUs, the communicator rank it holds, evidence."""
    proc = next((p for p in into if p.host == host and p.pid == pid), None)
    if proc is None:
        proc = RasProcess(host=host, pid=pid, gpus=gpus)
        into.append(proc)
    else:
        proc.gpus = sorted(set(proc.gpus) | set(gpus))
    if comm is not None and rank is not None:
        ranks = proc.comms.setdefault(comm, [])
        if rank not in ranks:
            ranks.append(rank)
    for line in evidence:
        add_evidence(proc.evidence, line)
    return proc


@dataclass
class Flags:
    """Everything that decides health, collected while parsing."""

    error: bool = False  # ERROR flag or section, DEAD processes, ABORT status
    incomplete: bool = False  # INCOMPLETE flag or section, missing ranks or processes
    warning: bool = False  # MISMATCH, TIMEOUT
    seen: set[str] = field(default_factory=set)

    def flag(self, name: str) -> None:
        name = name.upper()
        self.seen.add(name)
        if name in ("ERROR", "DEAD", "ABORT"):
            self.error = True
        elif name == "INCOMPLETE":
            self.incomplete = True
        elif name in ("MISMATCH", "TIMEOUT"):
            self.warning = True

    def health(self) -> RasHealth:
        if self.error:
            return "failed"
        if self.incomplete:
            return "degraded"
        return "warning" if self.warning else "ok"
