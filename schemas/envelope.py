"""The event envelope: every message on ``<prefix>.ev.>`` is exactly one of these, msgpack-encoded."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

TYPE_PREFIX = "ranksight.ev.v1."
MAX_RECORDS = 100_000


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

    @property
    def kind(self) -> str:
        return self.type.removeprefix(TYPE_PREFIX)

    @property
    def msg_id(self) -> str:
        """The JetStream de-duplication id: ``<agent>:<seq>``."""
        return f"{self.agent}:{self.seq}"
