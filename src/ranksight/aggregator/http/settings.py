"""The HTTP server's section: ``[aggregator.http]``."""

from __future__ import annotations

from pydantic import Field, SecretStr

from ranksight.core.config import Section


class HttpSettings(Section):
    """The aggregator's HTTP face (``aggregator.http``): JSON API, /openapi.json, /metrics, /events and the web page."""

    enabled: bool = True
    host: str = Field("127.0.0.1", description="bind address; anything but localhost exposes the API")
    port: int = Field(
        8080, ge=0, le=65535, description="0: any free port (the aggregator's http.url names it)"
    )
    token: SecretStr | None = Field(
        None, description="if set, every request needs 'Authorization: Bearer <token>'"
    )
    sse_queue_size: int = Field(
        256, ge=1, description="events buffered per /events client; a slower one is dropped"
    )
    max_connections: int = Field(
        512,
        ge=1,
        description="open HTTP connections at most (/events streams included); more are closed at once",
    )
    header_timeout_s: float = Field(
        10.0, gt=0, description="a new connection must send a complete request head within this"
    )
    idle_timeout_s: float = Field(
        60.0, gt=0, description="a connection waiting for its next request is closed after this"
    )
    metrics_max_series: int = Field(
        20_000,
        ge=1,
        description="series per metric family at most (label cardinality bound); the rest are dropped",
    )
