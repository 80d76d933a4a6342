"""Base class of every record carried in an envelope."""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, ConfigDict


class Record(BaseModel):
    """One fact in an envelope's ``records`` batch.

    Unknown fields are ignored so that a newer agent (which may only *add* fields, design §2) never breaks an older
    aggregator; wrong types are rejected.
    """

    model_config = ConfigDict(extra="ignore")

    # Envelopes of a kind whose latest record is the fact (a heartbeat, an endpoint) must carry at least one.
    min_records: ClassVar[int] = 0
    # Bumped when the model (or a sub-model) gains a field; compact batches carry it (``record_version``) and an
    # aggregator refuses a version newer than its own (``unsupported_version``).
    schema_version: ClassVar[int] = 1
