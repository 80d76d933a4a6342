"""The ingest pipeline without a database: msgpack bytes in, decode -> admit -> sequence, what the writer is to commit,
dead-letter and remember."""

from __future__ import annotations

from ranksight.aggregator.ingest.pipeline import Admission, Incoming
from ranksight.aggregator.ingest.sequence import Sequencer
from ranksight.aggregator.ingest.settings import IngestSettings
from tests.unit.test_ingest_admission import NOW, SUBJECTS, envelope, incoming


def run(sequencer: Sequencer, batch: list[Incoming], commit: bool = True) -> tuple[Admission, list[int]]:
    """One batch through the pipeline, and the seqs it admitted; ``commit``: the writer committed it, its marks
    settle."""
    admission = Admission(batch, SUBJECTS, sequencer.limits, sequencer)
    admitted = [env.seq for env, _, _ in admission.admitted()]
    if commit:
        sequencer.settle(admission.changed)
    return admission, admitted


def test_new_messages_pass_duplicates_are_skipped_and_a_gap_is_counted() -> None:
    sequencer = Sequencer(IngestSettings())
    first, admitted = run(sequencer, [incoming(envelope(seq=n)) for n in (1, 2, 4)])
    assert admitted == [1, 2, 4] and first.result.new_gaps == 1 and first.refused == []
    again, admitted = run(
        sequencer, [incoming(envelope(seq=n)) for n in (2, 3)]
    )  # 2: redelivered; 3: a gap's
    assert admitted == [3] and again.result.duplicates == 1
    [marks] = sequencer.marks[("c", "a")].values()
    assert (marks.high_seq, marks.gaps, marks.messages, marks.duplicates) == (4, [], 4, 1)


def test_refused_messages_are_listed_with_their_reason_and_the_rest_passes() -> None:
    sequencer = Sequencer(IngestSettings())
    batch = [incoming(b"\x93not an envelope"), incoming(envelope(node="b")),  # identity: node a's subject
             incoming(envelope(seq=1)), incoming(envelope(seq=1, records=[{"index": 5}]))]  # fmt: skip
    admission, admitted = run(sequencer, batch)
    reasons = [reason for _, reason, _ in admission.refused]
    assert reasons == ["not_a_map", "identity_mismatch", "seq_conflict"] and admitted == [1]
    assert admission.refused[0][0] is batch[0] and admission.result.conflicts == 1


def test_a_batch_not_committed_leaves_the_marks_as_they_were() -> None:
    sequencer = Sequencer(IngestSettings())
    run(sequencer, [incoming(envelope(seq=1))])
    run(sequencer, [incoming(envelope(seq=2))], commit=False)  # the write failed: the batch is fetched again
    assert run(sequencer, [incoming(envelope(seq=2))])[1] == [2]


def test_the_record_bound_leaves_the_rest_of_the_batch_for_later() -> None:
    sequencer = Sequencer(IngestSettings(fetch_max_records=2))
    two = [{"index": 0}, {"index": 1}]
    admission, admitted = run(sequencer, [incoming(envelope(seq=n, records=two)) for n in (1, 2, 3)])
    assert admitted == [1] and admission.result.taken == 1


def test_settling_evicts_the_oldest_incarnations_of_a_node() -> None:
    sequencer = Sequencer(IngestSettings(max_incarnations_per_node=2))
    batches = [[incoming(envelope(agent=f"inc{i}"), recv_ns=NOW + i)] for i in range(3)]
    evicted = []
    for batch in batches:
        admission = Admission(batch, SUBJECTS, sequencer.limits, sequencer)
        list(admission.admitted())
        evicted += sequencer.settle(admission.changed)
    assert evicted == [(("c", "a"), "inc0")] and sorted(sequencer.marks[("c", "a")]) == ["inc1", "inc2"]
    assert sequencer.forget_idle(NOW + 10**18) == [(("c", "a"), ["inc1", "inc2"])] and sequencer.marks == {}
