"""The event envelope: every message on ``<prefix>.ev.>`` is exactly one of these, msgpack-encoded.

Its records travel in one of two forms (:data:`~schemas.wire.WireFormat`): ``map``, the key ``records`` holding one map
per record (every field name repeated in every record; what every release reads), or ``compact``, the keys of
:class:`CompactRecords` in place of ``records`` (each field name once per batch).

These models declare the envelope (its fields, constraints and documentation); what the agent builds and the codec
decodes is their msgspec twin, :class:`schemas.twins.Envelope`, generated from them (:mod:`schemas.generate`).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ranksight.schemas.wire import MAX_FIELDS, MAX_RECORDS, EnvelopeNames


class Envelope(EnvelopeNames, BaseModel):
    """Envelope fields (design §2). ``records`` holds typed records: in the twin, the record twins (or, built by a
    test or a simulator, the record models: the codec encodes both)."""

    model_config = ConfigDict(extra="ignore")

    type: str
    cluster: str = Field(min_length=1)
    node: str = Field(min_length=1)
    agent: str = Field(min_length=1, description="agent incarnation id, new at each agent start")
    seq: int = Field(ge=1, description="per incarnation, +1 per message")
    ts: int = Field(ge=0, description="agent clock, ns since the epoch")
    ttl: float = Field(ge=0, description="seconds the facts stay valid after receipt")
    records: list[Any] = Field(max_length=MAX_RECORDS)


class CompactRecords(BaseModel):
    """The compact form of an envelope's ``records``: these keys stand in the envelope instead of ``records``.

    Record ``i`` has, for each name of ``fields``, the ``i``-th value of the column of the same position, plus every
    ``constants`` entry; a field in neither takes its model default. The decoder validates the records exactly like
    map-form ones and refuses a batch whose columns do not line up, that names a field twice or one its model lacks, or
    whose envelope takes fewer than :data:`~schemas.wire.MIN_COMPACT_RECORD_BYTES` per record (the encoder sends such a batch, of
    identical records, in the map form).
    """

    model_config = ConfigDict(extra="ignore")

    record_version: int = Field(
        ge=1, description="``schema_version`` of the kind's record model that wrote the batch"
    )
    count: int = Field(ge=0, le=MAX_RECORDS, description="records in the batch")
    fields: list[str] = Field([], max_length=MAX_FIELDS, description="the name of each column, in order")
    columns: list[list[Any]] = Field([], max_length=MAX_FIELDS, description="per field, its ``count`` values")
    constants: dict[str, Any] = Field(
        {}, max_length=MAX_FIELDS, description="fields with one value in every record"
    )
