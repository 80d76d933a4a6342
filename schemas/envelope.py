"""The event envelope: every message on ``<prefix>.ev.>`` is exactly one of these, msgpack-encoded.

Its records travel in one of two forms (:data:`WireFormat`): ``map``, the key ``records`` holding one map per record
(every field name repeated in every record; what every release reads), or ``compact``, the keys of
:class:`CompactRecords` in place of ``records`` (each field name once per batch).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

TYPE_PREFIX = "ranksight.ev.v1."
MAX_RECORDS = 100_000
MAX_FIELDS = 1024  # names in a compact batch: far above any record model's field count
# A compact batch takes at least this many bytes per record, about the smallest map-form record: decoded records cost
# memory per record whatever their bytes, so a few bytes must not become many records.
MIN_COMPACT_RECORD_BYTES = 8

WireFormat = Literal["compact", "map"]


def event_type(kind: str) -> str:
    return f"{TYPE_PREFIX}{kind}"


class Envelope(BaseModel):
    """Envelope fields (design §2). ``records`` holds typed records: the record models when an agent builds an
    envelope, their frozen msgspec twins (:mod:`schemas.structs`, same attributes) once :mod:`schemas.codec` decodes one.
    """

    model_config = ConfigDict(extra="ignore")

    type: str
    cluster: str = Field(min_length=1)
    node: str = Field(min_length=1)
    agent: str = Field(min_length=1, description="agent incarnation id, new at each agent start")
    seq: int = Field(ge=1, description="per incarnation, +1 per message")
    ts: int = Field(ge=0, description="agent clock, ns since the epoch")
    ttl: float = Field(ge=0, description="seconds the facts stay valid after receipt")
    records: list[Any] = Field(max_length=MAX_RECORDS)

    @classmethod
    def decoded(cls, **values: Any) -> Envelope:
        """An envelope of values the codec has validated already: what ``model_construct`` makes, without its work per
        field (a third of the cost of decoding a small batch; ingest makes one per message)."""
        env = cls.__new__(cls)
        object.__setattr__(env, "__dict__", values)
        object.__setattr__(env, "__pydantic_fields_set__", set(values))
        object.__setattr__(env, "__pydantic_extra__", None)
        object.__setattr__(env, "__pydantic_private__", None)
        return env

    @property
    def kind(self) -> str:
        return self.type.removeprefix(TYPE_PREFIX)

    @property
    def msg_id(self) -> str:
        """The JetStream de-duplication id: ``<agent>:<seq>``."""
        return f"{self.agent}:{self.seq}"


class CompactRecords(BaseModel):
    """The compact form of an envelope's ``records``: these keys stand in the envelope instead of ``records``.

    Record ``i`` has, for each name of ``fields``, the ``i``-th value of the column of the same position, plus every
    ``constants`` entry; a field in neither takes its model default. The decoder validates the records exactly like
    map-form ones and refuses a batch whose columns do not line up, that names a field twice or one its model lacks, or
    whose envelope takes fewer than :data:`MIN_COMPACT_RECORD_BYTES` per record (the encoder sends such a batch, of
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
