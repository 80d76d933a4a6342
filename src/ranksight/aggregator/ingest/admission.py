"""What a decoded message must also satisfy to be ingested: checks that need the subject, the receipt time or settings.

Decoding (:mod:`schemas.codec`) checks the shape and every value's range; :func:`admit` adds the checks the codec cannot
make alone. Each failure is a :class:`~schemas.codec.DecodeError` with a reason, so the store dead-letters it like any
undecodable message:

- ``bad_subject`` / ``subject_mismatch``: the subject is not an event subject, or names another kind;
- ``identity_mismatch``: the envelope's cluster or node is not the one of its subject. Per-node NATS permissions let a
  node publish only on its own subjects; this check makes that confine its *data* too;
- ``ts_out_of_range`` / ``ttl_out_of_range``: the agent clock or the TTL is beyond the configured bounds, relative to
  receipt (a fact that would never expire, or a timestamp the store cannot turn back into nanoseconds);
- ``too_many_sub_records``: a record whose lists and maps hold more than ``max_sub_records`` entries together (each
  costs memory in live state and a row's JSON in history, many times its bytes on the wire).
"""

from __future__ import annotations

from functools import cache

import msgspec

from ranksight.aggregator.ingest.settings import IngestSettings
from ranksight.aggregator.timefmt import NS
from ranksight.schemas.codec import DecodeError
from ranksight.schemas.envelope import Envelope
from ranksight.schemas.records import RECORD_KINDS
from ranksight.schemas.subjects import SubjectError, Subjects


def check_times(env: Envelope, recv_ns: int, limits: IngestSettings) -> None:
    """Reject an envelope whose ``ts`` or ``ttl`` is out of the bounds of ``limits`` around ``recv_ns``."""
    if not recv_ns - limits.max_clock_behind_s * NS <= env.ts <= recv_ns + limits.max_clock_ahead_s * NS:
        raise DecodeError("ts_out_of_range", f"ts {env.ts} is too far from receipt time {recv_ns}")
    if not 0 <= env.ttl <= limits.max_ttl_s:
        raise DecodeError("ttl_out_of_range", f"ttl {env.ttl} is not within [0, {limits.max_ttl_s}] s")


@cache
def _containers(kind: str) -> tuple[str, ...]:
    """The fields of a kind's records that hold lists or maps."""
    return tuple(f.name for f in msgspec.structs.fields(RECORD_KINDS[kind].model)
                 if isinstance(_bare(msgspec.inspect.type_info(f.type)), _CONTAINER_TYPES))  # fmt: skip


def _bare(info: msgspec.inspect.Type) -> msgspec.inspect.Type:
    """The type under a field's description."""
    return info.type if isinstance(info, msgspec.inspect.Metadata) else info


_CONTAINER_TYPES = (msgspec.inspect.ListType, msgspec.inspect.DictType)


def check_sub_records(env: Envelope, limit: int) -> None:
    names = _containers(env.kind) if env.kind in RECORD_KINDS else ()
    if not names:
        return
    for i, rec in enumerate(env.records):
        entries = sum(len(getattr(rec, name)) for name in names)
        if entries > limit:
            raise DecodeError("too_many_sub_records", f"record {i} holds {entries} list and map entries (at most "
                              f"{limit}: aggregator.ingest.max_sub_records)")  # fmt: skip


def admit(env: Envelope, subject: str, recv_ns: int, subjects: Subjects, limits: IngestSettings) -> None:
    """Raise :class:`DecodeError` unless ``env``, received on ``subject`` at ``recv_ns``, may be ingested."""
    try:
        where = subjects.parse_event(subject)
    except SubjectError as exc:
        raise DecodeError("bad_subject", str(exc)) from None
    if where.kind != env.kind:
        raise DecodeError("subject_mismatch", f"subject kind {where.kind!r} but type {env.type!r}")
    if not where.names(env.cluster, env.node):
        raise DecodeError(
            "identity_mismatch",
            f"envelope of {env.cluster}/{env.node} on the subject of {where.cluster}/{where.node}",
        )
    check_times(env, recv_ns, limits)
    check_sub_records(env, limits.max_sub_records)
