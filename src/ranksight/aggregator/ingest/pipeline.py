"""A fetched batch through decode -> admit -> sequence, pure: what the writer is to commit, what it is to dead-letter,
and the sequence marks it moves (:class:`Admission`)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ranksight.aggregator.ingest.admission import admit
from ranksight.aggregator.ingest.sequence import Marks, Sequencer
from ranksight.aggregator.ingest.settings import IngestSettings
from ranksight.schemas.codec import DecodeError, decode_columns
from ranksight.schemas.envelope import Envelope
from ranksight.schemas.subjects import Subjects

Columns = (
    tuple[list[Any], ...] | None
)  # a compact message's columns, as the codec read them (None: from the records)


@dataclass
class Incoming:
    subject: str
    data: bytes
    recv_ns: int
    msg_id: str | None = None


@dataclass
class BatchResult:
    accepted: list[tuple[Envelope, int]] = field(default_factory=list)  # (envelope, receipt ns)
    records: int = 0
    duplicates: int = 0
    dead_letters: int = 0
    new_gaps: int = 0
    conflicts: int = 0  # same incarnation and seq, different bytes (dead-lettered as seq_conflict)
    new_nodes: int = 0  # nodes whose sequence state this batch starts
    taken: int = 0  # messages of the batch handled (committed, skipped or dead-lettered): the rest wait (records bound)


class Admission:
    """One batch: :meth:`admitted` yields each new envelope, with its message and the columns the codec read, as it
    goes (a compact message's columns are not all kept at once); meanwhile ``result`` counts, ``refused`` lists the
    messages to dead-letter (message, reason, detail) and ``changed`` holds the batch's copy of the marks it moves.

    At most ``fetch_max_records`` decoded records are admitted (a message is never split: one alone may bring more):
    the messages from the one that would pass the bound on are left out, and ``result.taken`` says how many were
    handled."""

    def __init__(
        self, batch: list[Incoming], subjects: Subjects, limits: IngestSettings, sequencer: Sequencer
    ) -> None:
        self.batch, self.subjects, self.limits, self.sequencer = batch, subjects, limits, sequencer
        self.result = BatchResult(taken=len(batch))
        self.refused: list[tuple[Incoming, str, str]] = []
        self.changed: Marks = {}

    def admitted(self) -> Iterator[tuple[Envelope, Incoming, Columns]]:
        records = 0
        for i, msg in enumerate(self.batch):
            try:
                env, columns = decode_columns(msg.data)
                admit(env, msg.subject, msg.recv_ns, self.subjects, self.limits)
                if records and records + len(env.records) > self.limits.fetch_max_records:
                    self.result.taken = i
                    break
                new = self.sequencer.sequence(env, msg.data, msg.recv_ns, self.changed, self.result)
            except DecodeError as exc:
                self.refused.append((msg, exc.reason, str(exc)))
                continue
            if new:
                records += len(env.records)
                yield env, msg, columns
