"""The event envelope: every message on ``<prefix>.ev.>`` is exactly one of these, msgpack-encoded.

Its records travel in one of two forms (:data:`~schemas.wire.WireFormat`): ``map``, the key ``records`` holding one map
per record (every field name repeated in every record; what every release reads), or ``compact``, the keys of
:class:`CompactRecords` in place of ``records`` (each field name once per batch).

The agent builds these structs and the codec decodes into them (:mod:`schemas.codec`).
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from ranksight.schemas.wire import FLOAT_MAX, INT64_MAX, MAX_FIELDS, MAX_RECORDS, TYPE_PREFIX


class Envelope(msgspec.Struct, kw_only=True, frozen=True, gc=False):
    """Envelope fields (design §2). ``records`` holds the kind's typed records (:mod:`schemas.records`)."""

    type: str
    agent: Annotated[
        str, msgspec.Meta(min_length=1, description="agent incarnation id, new at each agent start")
    ]
    seq: Annotated[int, msgspec.Meta(ge=1, le=INT64_MAX, description="per incarnation, +1 per message")]
    cluster: Annotated[str, msgspec.Meta(min_length=1)]
    node: Annotated[str, msgspec.Meta(min_length=1)]
    ts: Annotated[int, msgspec.Meta(ge=0, le=INT64_MAX, description="agent clock, ns since the epoch")]
    ttl: Annotated[
        float, msgspec.Meta(ge=0, le=FLOAT_MAX, description="seconds the facts stay valid after receipt")
    ]
    records: Annotated[list[Any], msgspec.Meta(max_length=MAX_RECORDS)]

    @property
    def kind(self) -> str:
        return self.type.removeprefix(TYPE_PREFIX)

    @property
    def msg_id(self) -> str:
        """The JetStream de-duplication id: ``<agent>:<seq>``."""
        return f"{self.agent}:{self.seq}"


class CompactRecords(msgspec.Struct, kw_only=True, frozen=True, gc=False):
    """The compact form of an envelope's ``records``: these keys stand in the envelope instead of ``records``.

    Record ``i`` has, for each name of ``fields``, the ``i``-th value of the column of the same position, plus every
    ``constants`` entry; a field in neither takes its record's default. The decoder validates the records exactly like
    map-form ones and refuses a batch whose columns do not line up, that names a field twice or one its record lacks,
    or whose envelope takes fewer than :data:`~schemas.wire.MIN_COMPACT_RECORD_BYTES` per record (the encoder sends
    such a batch, of identical records, in the map form).
    """

    record_version: Annotated[
        int,
        msgspec.Meta(
            ge=1, le=INT64_MAX, description="``schema_version`` of the kind's record that wrote the batch"
        ),
    ]
    count: Annotated[int, msgspec.Meta(ge=0, le=MAX_RECORDS, description="records in the batch")]
    fields: Annotated[
        list[str], msgspec.Meta(max_length=MAX_FIELDS, description="the name of each column, in order")
    ] = []
    columns: Annotated[
        list[list[Any]], msgspec.Meta(max_length=MAX_FIELDS, description="per field, its ``count`` values")
    ] = []
    constants: Annotated[
        dict[str, Any],
        msgspec.Meta(max_length=MAX_FIELDS, description="fields with one value in every record"),
    ] = {}
