"""Text ``STATUS`` / ``VERBOSE STATUS`` replies of NCCL/RCCL 2.24 to 2.30 -> :class:`RasStatus`.

The reply is a sequence of blocks (the server's order): version header, job summary (three layouts: uniform; uniform
GPUs per process with differing processes per node; fully mixed, each ending in a ``(total)`` line), ``Communicators...
(N.NNs)`` (``%.2f`` or ``%.3f``), the group table, then ``Errors`` and ``Warnings``. Inside those, a block starts with a
heading at column 0 (``INCOMPLETE``, ``DEAD``, ``TIMEOUT``, ``#g-i (hash) FLAG``) followed by indented detail lines.
Detail lists may be absent (above the server's outlier threshold) and counts may be garbage (pre-2.29.2 bugs): neither
changes the result shape, and health is taken from the flags alone. Fragments (docs excerpts, ``[...]`` elisions) parse
as far as they go.
"""

from __future__ import annotations

import re

from agent.collectors.ras.errors import RasParseError
from agent.collectors.ras.facts import (
    Flags,
    add_process,
    normalize_hash,
    parse_gpus,
    sane_count,
)
from schemas.records.ras import RasCommunicator, RasMismatch, RasProcess, RasStatus

_VERSION = re.compile(r"^(?:NCCL|RCCL) version (\d+\.\d+\.\d+)")
_COLLECTING = re.compile(r"^Communicators\.\.\.\s*\((-?\d+(?:\.\d+)?)s\)")
_GROUP_ROW = re.compile(
    r"^\s*(\d+)\s+(\d+)\s+(\d+)\s+(\d+(?:-\d+)?)\s+(\d+)\s+(\d+)\s+([A-Z]+)\s+([A-Z,]+)\s*$"
)
_COMM_HEAD = re.compile(r"^#(\d+)-(\d+) \(([0-9a-fA-Fx]+)\) ([A-Z]+)\s*$")
_PROCESS = re.compile(r"^\s+Process (-?\d+) on node (\S+) managing GPUs? (.+?)\s*$")
_RANK = re.compile(r"^\s+Rank (-?\d+)\b")
_MISSING_RANKS_224 = re.compile(r"^\s+The missing ranks?: (.+)$")
_TIMEOUTS = re.compile(r"^\s+Encountered (-?\d+) communication timeouts?")
_DIFFERENT_OPS = re.compile(r"^\s+Communicator ranks have different (\w+) operation counts")
_INTS = re.compile(r"-?\d+")

_SECTIONS = {"Errors", "Warnings", "Job summary"}


def looks_like_text_status(text: str) -> bool:
    return any(
        _VERSION.match(line) or _COMM_HEAD.match(line) or _GROUP_ROW.match(line) or line in _SECTIONS
        or line.startswith("Communicators...")
        for line in text.splitlines()
    )  # fmt: skip


class _Parser:
    def __init__(self) -> None:
        self.flags = Flags()
        self.version: str | None = None
        self.nodes: int | None = None
        self.processes: int | None = None
        self.gpus: int | None = None
        self.collection_s: float | None = None
        self.groups: dict[int, tuple[int, str, list[str]]] = {}  # group -> (ranks per comm, status, errors)
        self.comms: dict[str, RasCommunicator] = {}
        self.missing: list[RasProcess] = []
        self.dead: list[RasProcess] = []
        self.mismatches: list[RasMismatch] = []
        self.timeouts = 0
        self.block: str | None = None  # current heading: INCOMPLETE, DEAD, TIMEOUT or a comm hash + flag
        self.comm: RasCommunicator | None = None
        self.summary_header: list[str] | None = None  # the '(total)' line; the next line holds the values
        self.recognized = False

    def feed(self, line: str) -> None:
        if (m := _VERSION.match(line)) is not None:
            self.version, self.recognized = m.group(1), True
        elif line.strip().startswith("(total)"):
            self.summary_header = line.split()
        elif self.summary_header is not None:
            self._summary(self.summary_header, line)
            self.summary_header = None
        elif (m := _COLLECTING.match(line)) is not None:
            self.collection_s, self.recognized = float(m.group(1)), True
        elif (m := _GROUP_ROW.match(line)) is not None:
            self._group(m)
        elif (m := _COMM_HEAD.match(line)) is not None:
            self._comm_head(m)
        elif line in ("INCOMPLETE", "DEAD", "TIMEOUT"):
            self.block, self.comm, self.recognized = line, None, True
            self.flags.flag(line)
        elif line.startswith("  "):
            self._detail(line)
        elif line.strip() and not line.startswith(("=", "Group", "    #", "[...]")):
            self.block, self.comm = None, None
            if line.strip() in _SECTIONS:
                self.recognized = True

    def _summary(self, header: list[str], line: str) -> None:
        values = [int(v) for v in _INTS.findall(line)]
        # "(total) per node per process (total) (total)" has 5 columns; the two mixed layouts end in 3 totals.
        picks = (
            (0, 3, 4) if len(header) >= 7 and len(values) == 5 else (0, 1, 2) if len(values) == 3 else None
        )
        if picks is not None:
            self.nodes, self.processes, self.gpus = (sane_count(values[i]) for i in picks)
            self.recognized = True

    def _group(self, m: re.Match[str]) -> None:
        errors = [e for e in m.group(8).split(",") if e != "OK"]
        self.groups[int(m.group(1))] = (int(m.group(5)), m.group(7), errors)
        for flag in [*errors, m.group(7)]:
            self.flags.flag(flag)
        self.recognized = True

    def _comm_head(self, m: re.Match[str]) -> None:
        group, flag = int(m.group(1)), m.group(4)
        key = normalize_hash(m.group(3))
        comm = self.comms.get(key)
        if comm is None:
            size, status, _ = self.groups.get(group, (None, None, []))
            comm = self.comms[key] = RasCommunicator(hash=key, size=size, status=status)
        if flag not in comm.errors:
            comm.errors.append(flag)
        self.flags.flag(flag)
        self.block, self.comm, self.recognized = flag, comm, True

    def _detail(self, line: str) -> None:
        block, comm = self.block, self.comm
        if (m := _PROCESS.match(line)) is not None and block in ("INCOMPLETE", "DEAD") and comm is None:
            target = self.dead if block == "DEAD" else self.missing
            add_process(target, m.group(2), sane_count(int(m.group(1))), parse_gpus(m.group(3)))
        elif (m := _TIMEOUTS.match(line)) is not None:
            self.timeouts = sane_count(int(m.group(1))) or 0
        elif comm is None:
            return
        elif block == "INCOMPLETE" and (m := _RANK.match(line)) is not None:
            self._missing_rank(comm, int(m.group(1)))
        elif block == "INCOMPLETE" and (m := _MISSING_RANKS_224.match(line)) is not None:
            for value in _INTS.findall(m.group(1))[:1024]:
                self._missing_rank(comm, int(value))
        elif block == "MISMATCH" and "have different status" in line:
            self.mismatches.append(RasMismatch(hash=comm.hash, kind="status"))
        elif block == "MISMATCH" and (m := _DIFFERENT_OPS.match(line)) is not None:
            collective = None if m.group(1) == "collective" else m.group(1)  # 2.24: one line for all kinds
            self.mismatches.append(RasMismatch(hash=comm.hash, kind="op_count", collective=collective))

    @staticmethod
    def _missing_rank(comm: RasCommunicator, rank: int) -> None:
        if sane_count(rank) is not None and rank not in comm.missing_ranks:
            comm.missing_ranks.append(rank)

    def result(self) -> RasStatus:
        if not self.recognized:
            raise RasParseError(
                "not a RAS status reply: no version line, table or Errors/Warnings section found"
            )
        if self.missing:
            self.flags.flag("INCOMPLETE")
        return RasStatus(
            format="text", version=self.version, health=self.flags.health(), nodes=self.nodes,
            processes=self.processes, gpus=self.gpus, communicators=list(self.comms.values()),
            missing_processes=self.missing, dead_processes=self.dead, mismatches=self.mismatches,
            timeouts=self.timeouts, collection_s=self.collection_s,
        )  # fmt: skip


def parse_status_text(data: bytes) -> RasStatus:
    """Parse one text status reply (bytes as read from the socket, to EOF)."""
    text = data.decode("utf-8", errors="replace")
    stripped = text.lstrip()
    if stripped.startswith(("ERROR:", "BUSY:")):
        raise RasParseError(f"the RAS server refused: {stripped.splitlines()[0]}")
    parser = _Parser()
    for line in text.splitlines():
        parser.feed(line.rstrip("\r"))
    return parser.result()
