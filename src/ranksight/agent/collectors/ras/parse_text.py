"""Text ``STATUS`` / ``VERBOSE STATUS`` replies of NCCL/RCCL 2.24 to 2.30 -> :class:`RasStatus`.

The reply is a sequence of blocks (the server's order): version header, job summary (three layouts: uniform; uniform
GPUs per process with differing processes per node; fully mixed, each ending in a ``(total)`` line), ``Communicators...
(N.NNs)`` (``%.2f`` or ``%.3f``), the group table, then ``Errors`` and ``Warnings``. Inside those, a block starts with a
heading at column 0 (``INCOMPLETE``, ``DEAD``, ``TIMEOUT``, ``#g-i (hash) FLAG``) followed by indented detail lines.
Detail lists may be absent (above the server's outlier threshold) and counts may be garbage (pre-2.29.2 bugs): neither
changes the result shape, and health is taken from the flags alone; a communicator whose missing-rank list was elided
says ``complete: false``. Ranks the server cannot name (``[process information not found]``) are ``unknown_ranks``.
Each process and communicator keeps the exact lines that name it (``evidence``). Fragments (docs excerpts, ``[...]``
elisions) parse as far as they go.

Phantom communicators: 2.26 to 2.28.x print communicators that do not exist (a group row with 0 nodes and 0 ranks per
communicator, then e.g. ``Missing communicator data from 257 ranks`` under an impossible hash); such groups and their
blocks are dropped, so they raise nothing.
"""

from __future__ import annotations

import re

import msgspec

from ranksight.agent.collectors.ras.errors import RasParseError
from ranksight.agent.collectors.ras.facts import (
    Flags,
    add_evidence,
    add_process,
    normalize_hash,
    parse_gpus,
    sane_count,
)
from ranksight.schemas.records.ras import RasCommunicator, RasLaggingRank, RasMismatch, RasProcess, RasStatus

_VERSION = re.compile(r"^(?:NCCL|RCCL) version (\d+\.\d+\.\d+)")
_COLLECTING = re.compile(r"^Communicators\.\.\.\s*\((-?\d+(?:\.\d+)?)s\)")
_GROUP_ROW = re.compile(
    r"^\s*(\d+)\s+(\d+)\s+(\d+)\s+(\d+(?:-\d+)?)\s+(\d+)\s+(\d+)\s+([A-Z]+)\s+([A-Z,]+)\s*$"
)
_COMM_HEAD = re.compile(r"^#(\d+)-(\d+) \(([0-9a-fA-Fx]+)\) ([A-Z]+)\s*$")
_PROCESS = re.compile(r"^\s+Process (-?\d+) on node (\S+) managing GPUs? (.+?)\s*$")
_RANK = re.compile(r"^\s+Rank (-?\d+)\b")
_RANK_OWNER = re.compile(r"-- GPU (\S+(?: \(NVML [^)]*\))?) managed by process (-?\d+) on node (\S+)")
_UNKNOWN_RANK = "[process information not found]"
_MISSING_COUNT = re.compile(r"^\s+Missing communicator data from (\d+) ranks?")
_MISSING_RANKS_224 = re.compile(r"^\s+The missing ranks?: (.+)$")
_TIMEOUTS = re.compile(r"^\s+Encountered (-?\d+) communication timeouts?")
_DIFFERENT_OPS = re.compile(r"^\s+Communicator ranks have different (\w+) operation counts")
# in a MISMATCH block, most frequent count first: a group line, its ranks listed when they are the outliers, or one
# outlier rank on a line of its own; "not launched any operations" is count 0
_OPS_GROUP = re.compile(r"^\s+\d+ ranks have (?:launched up to operation (\d+)|not launched any operations)")
_OPS_RANK = re.compile(r"^\s+Rank (-?\d+) has (?:launched up to operation (\d+)|not launched any operations)")
_INTS = re.compile(r"-?\d+")

_SECTIONS = {"Errors", "Warnings", "Job summary"}


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
        self.block_lines: list[str] = []  # the job-level block's heading and summary lines (evidence)
        self.phantom_groups: set[int] = set()
        self.missing_count: dict[str, int] = {}  # comm -> "Missing communicator data from N ranks"
        self.rank_owners: list[
            tuple[str, int, str, int | None, list[int], str]
        ] = []  # comm, rank, host, pid, gpus, line
        self.summary_header: list[str] | None = None  # the '(total)' line; the next line holds the values
        # MISMATCH op counts: (comm, collective) -> the counts printed, and the ranks named with theirs
        self.op_counts: dict[tuple[str, str], tuple[list[int], list[RasLaggingRank]]] = {}
        self.op_block: tuple[str, tuple[list[int], list[RasLaggingRank]]] | None = (
            None  # collective, its counts
        )
        self.op_group: int | None = None  # the count of the group whose ranks are being listed
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
            self.block, self.comm, self.recognized, self.block_lines = line, None, True, [line]
            self.op_block = None
            self.flags.flag(line)
        elif line.startswith("  "):
            self._detail(line)
        elif line.strip() and not line.startswith(("=", "Group", "    #", "[...]")):
            self.block, self.comm, self.op_block = None, None, None
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
        group, ranks_per_comm = int(m.group(1)), int(m.group(5))
        errors = [e for e in m.group(8).split(",") if e != "OK"]
        self.groups[group] = (ranks_per_comm, m.group(7), errors)
        self.recognized = True
        if ranks_per_comm == 0:  # no communicator has 0 ranks: the 2.26-2.28.x phantom
            self.phantom_groups.add(group)
            return
        for flag in [*errors, m.group(7)]:
            self.flags.flag(flag)

    def _comm_head(self, m: re.Match[str]) -> None:
        group, flag = int(m.group(1)), m.group(4)
        self.recognized, self.op_block = True, None
        if group in self.phantom_groups:
            self.block, self.comm = "PHANTOM", None
            return
        key = normalize_hash(m.group(3))
        comm = self.comms.get(key)
        if comm is None:
            size, status, _ = self.groups.get(group, (None, None, []))
            comm = self.comms[key] = RasCommunicator(hash=key, size=size, status=status)
        if flag not in comm.errors:
            comm.errors.append(flag)
        add_evidence(comm.evidence, m.group(0))
        self.block, self.comm = flag, comm

    def _detail(self, line: str) -> None:
        block, comm = self.block, self.comm
        if block == "PHANTOM":
            return
        if comm is None and block in ("INCOMPLETE", "DEAD"):
            if (m := _PROCESS.match(line)) is not None:
                target = self.dead if block == "DEAD" else self.missing
                add_process(target, m.group(2), sane_count(int(m.group(1))), parse_gpus(m.group(3)),
                            evidence=[*self.block_lines, line])  # fmt: skip
            else:
                self.block_lines.append(line)
            return
        if (m := _TIMEOUTS.match(line)) is not None:
            self.timeouts = sane_count(int(m.group(1))) or 0
        if comm is None:
            return
        add_evidence(comm.evidence, line)
        if block == "INCOMPLETE" and (m := _MISSING_COUNT.match(line)) is not None:
            self.missing_count[comm.hash] = int(m.group(1))
        elif block == "INCOMPLETE" and (m := _RANK.match(line)) is not None:
            rank = int(m.group(1))
            if _UNKNOWN_RANK in line:
                if sane_count(rank) is not None and rank not in comm.unknown_ranks:
                    comm.unknown_ranks.append(rank)
                return
            self._missing_rank(comm, rank)
            if (owner := _RANK_OWNER.search(line)) is not None:
                self.rank_owners.append((comm.hash, rank, owner.group(3), sane_count(int(owner.group(2))),
                                         parse_gpus(owner.group(1)), line))  # fmt: skip
        elif block == "INCOMPLETE" and (m := _MISSING_RANKS_224.match(line)) is not None:
            for value in _INTS.findall(m.group(1))[:1024]:
                self._missing_rank(comm, int(value))
        elif block == "MISMATCH" and "have different status" in line:
            self.mismatches.append(RasMismatch(hash=comm.hash, kind="status"))
            self.op_block = None
        elif block == "MISMATCH" and (m := _DIFFERENT_OPS.match(line)) is not None:
            collective = None if m.group(1) == "collective" else m.group(1)  # 2.24: one line for all kinds
            self.mismatches.append(RasMismatch(hash=comm.hash, kind="op_count", collective=collective))
            # 2.24's counts add up every kind: no collective to name a rank behind in
            self.op_block = (
                None
                if collective is None
                else (collective, self.op_counts.setdefault((comm.hash, collective), ([], [])))
            )
            self.op_group = None
        elif block == "MISMATCH" and self.op_block is not None:
            self._op_count(self.op_block[1], line, self.op_block[0])

    def _op_count(self, counts: tuple[list[int], list[RasLaggingRank]], line: str, collective: str) -> None:
        """One line of a collective's op counts: a group's count, or a rank named with its count."""
        values, named = counts
        if (m := _OPS_GROUP.match(line)) is not None:
            self.op_group = int(m.group(1) or 0)
            values.append(self.op_group)
            return
        if (m := _OPS_RANK.match(line)) is not None:
            rank, count = int(m.group(1)), int(m.group(2) or 0)
            values.append(count)
        elif self.op_group is not None and (m := _RANK.match(line)) is not None:
            rank, count = int(m.group(1)), self.op_group
        else:
            return
        if (owner := _RANK_OWNER.search(line)) is not None and sane_count(rank) is not None:
            named.append(RasLaggingRank(rank=rank, host=owner.group(3), pid=sane_count(int(owner.group(2))),
                                        collective=collective, count=count, peers_count=0))  # fmt: skip

    @staticmethod
    def _missing_rank(comm: RasCommunicator, rank: int) -> None:
        if sane_count(rank) is not None and rank not in comm.missing_ranks:
            comm.missing_ranks.append(rank)

    def _finish_comms(self) -> None:
        """Flag the communicators, mark elided rank lists, give each missing rank's process its ranks."""
        for key, comm in self.comms.items():
            expected = self.missing_count.get(key)
            for flag in comm.errors:
                self.flags.flag(flag)
            if expected is not None and len(comm.missing_ranks) + len(comm.unknown_ranks) < expected:
                comm.complete = False
        for (key, _), (
            values,
            named,
        ) in self.op_counts.items():  # the ranks behind their collective's highest
            highest = max(values, default=0)
            self.comms[key].lagging_ranks += [
                msgspec.structs.replace(r, peers_count=highest) for r in named if r.count < highest
            ]
        for key, rank, host, pid, gpus, line in self.rank_owners:
            if key in self.comms:
                dead = any(p.host == host and p.pid == pid for p in self.dead)
                add_process(self.dead if dead else self.missing, host, pid, gpus, comm=key, rank=rank,
                            evidence=[line])  # fmt: skip

    def result(self) -> RasStatus:
        if not self.recognized:
            raise RasParseError(
                "not a RAS status reply: no version line, table or Errors/Warnings section found"
            )
        self._finish_comms()
        if self.missing:
            self.flags.flag("INCOMPLETE")
        return RasStatus(
            format="text", version=self.version, health=self.flags.health(), nodes=self.nodes,
            processes=self.processes, gpus=self.gpus, communicators=list(self.comms.values()),
            missing_processes=self.missing, dead_processes=self.dead, mismatches=self.mismatches,
            timeouts=self.timeouts, collection_s=self.collection_s, all_communicators=False,
        )  # fmt: skip


def parse_status_text(data: bytes) -> RasStatus:
    """Parse one text status reply (bytes as read from the socket, to EOF)."""
    text = data.decode("utf-8", errors="replace")
    stripped = text.lstrip()
    if stripped.startswith("ERROR:"):
        raise RasParseError(f"the RAS server refused: {stripped.splitlines()[0]}")
    parser = _Parser()
    try:
        for line in text.splitlines():
            parser.feed(line.rstrip("\r"))
    except ValueError as exc:  # a number too long to convert (Python's int limit): a broken or hostile peer
        raise RasParseError(f"unreadable RAS status: {exc}") from None
    return parser.result()
