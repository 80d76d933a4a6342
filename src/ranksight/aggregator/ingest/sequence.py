"""Exactly-once effect: each agent incarnation numbers its messages 1, 2, 3...; per incarnation (keyed by cluster, node
and incarnation id, so one node cannot touch another's marks) the highest sequence committed and the ranges never seen
(gaps). A message at or below the high-water mark that does not fill a gap is a duplicate (redelivery after a crash, or
a re-publish after a lost ack) and is skipped; one whose bytes differ from the message first committed under that
number is refused as ``seq_conflict``. Every resource is bounded by :class:`~ranksight.aggregator.ingest.settings.IngestSettings`: a
seq jump beyond ``max_seq_jump`` opens no gap, a node keeps at most ``max_incarnations_per_node`` incarnations, at most
``max_nodes`` nodes are tracked, idle ones are forgotten.

Pure: the writer loads the marks from history (:meth:`Sequencer.load`), a batch works on a copy of those it moves, and
the writer hands them back once they are committed with the rows (:meth:`Sequencer.settle`).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ranksight.aggregator.ingest.settings import IngestSettings
from ranksight.aggregator.timefmt import NS
from ranksight.schemas.codec import DecodeError
from ranksight.schemas.envelope import Envelope

if TYPE_CHECKING:
    from ranksight.aggregator.ingest.pipeline import BatchResult

MAX_GAP_RANGES = 1000
NodeKey = tuple[str, str]  # (cluster, node)
Marks = dict[NodeKey, dict[str, "AgentSeq"]]  # node -> its incarnations' sequence state


@dataclass
class AgentSeq:
    agent: str
    cluster: str
    node: str
    high_seq: int = 0
    messages: int = 0
    duplicates: int = 0
    gaps: list[list[int]] = field(default_factory=list)  # [lo, hi] inclusive, ascending
    first_recv: int = 0
    last_recv: int = 0
    seq_jumps: int = 0  # jumps beyond max_seq_jump: no gap opened
    digests: dict[int, int] = field(default_factory=dict)  # seq -> crc32 of its bytes, the most recent ones
    # digests of this batch's messages: the committed ones above are shared with the copy a batch works on, not copied
    # (at 1024 nodes, copying conflict_window digests per node and commit grew the writer's CPU by a tenth in minutes)
    pending: dict[int, int] = field(default_factory=dict)

    @property
    def gaps_open(self) -> int:
        return sum(hi - lo + 1 for lo, hi in self.gaps)

    def accept(self, seq: int, max_jump: int) -> bool:
        """Record ``seq``; False if it is a duplicate. A jump of more than ``max_jump`` opens no gap (it is counted)."""
        if seq > self.high_seq:
            if seq - self.high_seq - 1 > max_jump:
                self.seq_jumps += 1
            elif seq > self.high_seq + 1:
                self.gaps.append([self.high_seq + 1, seq - 1])
                del self.gaps[:-MAX_GAP_RANGES]
            self.high_seq = seq
            return True
        for i, (lo, hi) in enumerate(self.gaps):
            if lo <= seq <= hi:  # a late message fills a gap
                pieces = [p for p in ([lo, seq - 1], [seq + 1, hi]) if p[0] <= p[1]]
                self.gaps[i : i + 1] = pieces
                return True
        return False

    def digest(self, seq: int) -> int | None:
        """The digest remembered for ``seq``: of this batch, else committed; None when it is not remembered."""
        found = self.pending.get(seq)
        return self.digests.get(seq) if found is None else found

    def remember(self, seq: int, digest: int) -> None:
        self.pending[seq] = digest

    def settle(self, window: int) -> None:
        """This batch's digests committed: the ``window`` most recent are kept."""
        digests = self.digests
        digests.update(self.pending)
        self.pending = {}
        while len(digests) > window:
            del digests[next(iter(digests))]

    def copy(self) -> AgentSeq:
        """A copy for a batch to work on, a failed commit leaving this one as it is; their committed digests are one
        dict, changed only once the batch is committed (:meth:`settle`)."""
        return AgentSeq(self.agent, self.cluster, self.node, self.high_seq, self.messages, self.duplicates,
                        [list(g) for g in self.gaps], self.first_recv, self.last_recv, self.seq_jumps,
                        self.digests)  # fmt: skip


class Sequencer:
    """The committed sequence marks of every tracked node's incarnations."""

    def __init__(self, limits: IngestSettings) -> None:
        self.limits = limits
        self.marks: Marks = {}

    def load(self, rows: Iterable[tuple[str, str, str, int, int, int, int, int, int]],
             gaps: dict[tuple[str, str, str], list[list[int]]]) -> None:  # fmt: skip
        """The marks as history holds them: ``rows`` (agent, cluster, node, high_seq, messages, duplicates, first and
        last receipt ns, seq_jumps), most recently seen first, and each incarnation's gaps."""
        self.marks = {}
        for agent, cluster, node, high, messages, dups, first, last, jumps in rows:
            if len(self.marks) >= self.limits.max_nodes and (cluster, node) not in self.marks:
                continue
            self.marks.setdefault((cluster, node), {})[agent] = AgentSeq(
                agent, cluster, node, high, messages, dups, gaps[cluster, node, agent], first, last, jumps
            )

    def stored(self, key: NodeKey, agent: str) -> AgentSeq | None:
        return self.marks.get(key, {}).get(agent)

    def sequence(self, env: Envelope, data: bytes, recv_ns: int, changed: Marks, result: BatchResult) -> bool:
        """Whether the admitted ``env`` (its message's bytes ``data``) is new (False: a duplicate); :class:`DecodeError`
        if it is refused. The marks it moves are copied into ``changed`` first, so a failed commit leaves them as
        they were."""
        limits = self.limits
        key = (env.cluster, env.node)
        incarnations = changed.get(key)
        if incarnations is None:
            if key not in self.marks:
                if len(self.marks) + result.new_nodes >= limits.max_nodes:
                    raise DecodeError(
                        "too_many_nodes", f"{limits.max_nodes} nodes are tracked already (max_nodes)"
                    )
                result.new_nodes += 1
            incarnations = changed[key] = {}
        seq = incarnations.get(env.agent)
        # First change in this batch: work on a copy, so a failed commit leaves the marks untouched.
        if seq is None:
            stored = self.stored(key, env.agent)
            seq = stored.copy() if stored is not None else AgentSeq(env.agent, *key, first_recv=recv_ns)
            incarnations[env.agent] = seq
        seq.last_recv = recv_ns
        digest = zlib.crc32(data)
        gaps_before = seq.gaps_open
        if not seq.accept(env.seq, limits.max_seq_jump):
            if seq.digest(env.seq) not in (None, digest):
                result.conflicts += 1
                raise DecodeError("seq_conflict", f"{env.msg_id} was committed before with different content")
            seq.duplicates += 1
            result.duplicates += 1
            return False
        seq.remember(env.seq, digest)
        result.new_gaps += max(0, seq.gaps_open - gaps_before)
        seq.messages += 1
        return True

    def settle(self, changed: Marks) -> list[tuple[NodeKey, str]]:
        """A batch's marks committed: they become the marks. The incarnations evicted to keep the
        ``max_incarnations_per_node`` most recently seen of a node, whose stored marks the writer deletes."""
        evicted = []
        for key, incarnations in changed.items():
            for seq in incarnations.values():
                seq.settle(self.limits.conflict_window)
            kept = self.marks.setdefault(key, {})
            kept.update(incarnations)
            excess = len(kept) - self.limits.max_incarnations_per_node
            if excess > 0:
                for seq in sorted(kept.values(), key=lambda s: s.last_recv)[:excess]:
                    del kept[seq.agent]
                    evicted.append((key, seq.agent))
        return evicted

    def forget_idle(self, now_ns: int) -> list[tuple[NodeKey, list[str]]]:
        """Drop the marks of nodes silent for ``node_forget_after_s``: each node with its incarnations."""
        horizon = now_ns - int(self.limits.node_forget_after_s * NS)
        idle = [key for key, inc in self.marks.items() if max(s.last_recv for s in inc.values()) < horizon]
        return [(key, list(self.marks.pop(key))) for key in idle]

    def stats(self) -> dict[str, int]:
        incarnations = [s for inc in self.marks.values() for s in inc.values()]
        return {
            "nodes": len(self.marks),
            "agents": len(incarnations),
            "messages": sum(s.messages for s in incarnations),
            "duplicates": sum(s.duplicates for s in incarnations),
            "gaps_open": sum(s.gaps_open for s in incarnations),
            "seq_jumps": sum(s.seq_jumps for s in incarnations),
        }
