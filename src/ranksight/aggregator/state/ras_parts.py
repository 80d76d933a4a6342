"""Put the parts of a RAS status back together (:mod:`agent.collectors.ras.parts` splits a status too big for one
message): a poll is judged once, whole, when every part of it has arrived.

Parts are keyed by the agent incarnation that polled and its ``poll_id``; each agent has at most one poll in
assembly, so memory stays bounded: a part of a newer poll abandons an unfinished older one (counted in
``abandoned``; its parts stay in history). Pure: no clock, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from msgspec.structs import replace

from ranksight.aggregator.forgetting import NodeKey, without_nodes
from ranksight.schemas.envelope import Envelope
from ranksight.schemas.records import RasRecord
from ranksight.schemas.wire import RAS_SPLIT_LISTS


@dataclass
class _Poll:
    poll_id: int | None
    parts: int
    received: dict[int, RasRecord] = field(default_factory=dict)
    recv_ns: int = 0


@dataclass
class PartAssembler:
    polls: dict[tuple[str, str, str], _Poll] = field(default_factory=dict)  # (cluster, node, agent) -> poll
    newest: dict[tuple[str, str, str], int] = field(default_factory=dict)  # the newest poll_id seen per agent
    abandoned: int = 0  # polls whose parts never all arrived (a newer poll came first)
    malformed: int = 0  # parts numbered outside their poll's count

    def add(self, env: Envelope, rec: RasRecord, recv_ns: int) -> tuple[RasRecord, int] | None:
        """The whole status and its receipt time (the last part's) once ``rec`` completes its poll; else None."""
        if rec.parts <= 1:
            return rec, recv_ns
        if not 0 <= rec.part < rec.parts:
            self.malformed += 1
            return None
        key = (env.cluster, env.node, env.agent)
        if rec.poll_id is not None:
            if rec.poll_id < self.newest.get(key, rec.poll_id):
                return None  # a late part of a poll given up for a newer one
            self.newest[key] = rec.poll_id
        poll = self.polls.get(key)
        if poll is None or poll.poll_id != rec.poll_id or poll.parts != rec.parts:
            if poll is not None:
                self.abandoned += 1
            poll = self.polls[key] = _Poll(rec.poll_id, rec.parts)
        poll.received[rec.part] = rec
        poll.recv_ns = max(poll.recv_ns, recv_ns)
        if len(poll.received) < poll.parts:
            return None
        del self.polls[key]
        ordered = [poll.received[i] for i in sorted(poll.received)]
        lists = {
            name: [entry for part in ordered for entry in getattr(part, name)] for name in RAS_SPLIT_LISTS
        }
        return replace(ordered[0], **{**lists, "part": 0, "parts": 1}), poll.recv_ns

    def forget(self, nodes: set[NodeKey]) -> None:
        self.polls = without_nodes(self.polls, nodes)
        self.newest = without_nodes(self.newest, nodes)
