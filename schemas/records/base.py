"""Base class of every record carried in an envelope."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Record(BaseModel):
    """One fact in an envelope's ``records`` batch.

    Unknown fields are ignored so that a newer agent (which may only *add* fields, design §2) never breaks an older
    aggregator; wrong types are rejected.
    """

    model_config = ConfigDict(extra="ignore")
