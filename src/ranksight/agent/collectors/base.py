"""The two collector shapes and the health the runtime keeps for each.

- :class:`PolledCollector`: ``collect()`` every ``interval_s``; returns records.
- :class:`StreamingCollector`: ``run(emit)`` until cancelled; calls ``emit(records)`` as facts arrive.

Collectors return or raise errors; the runtime records health (last success, last error, duration) and publishes it in the
heartbeat, with the error text made printable and bounded. A collector in ``error`` stays there, restarts included, until
a real success. ``detect()`` returning ``False`` means the source is not on this node: the collector is ``absent``, not failing.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Protocol

import msgspec

from ranksight.errors import RanksightError
from ranksight.schemas.records import CollectorHealth, Record

if TYPE_CHECKING:
    from ranksight.agent.collector_settings import CollectorSettings
    from ranksight.agent.runtime import AgentContext


class Emit(Protocol):
    """What a streaming collector publishes through: ``on_ack`` runs once the stream has acknowledged the records;
    ``kind`` and ``ttl`` default to the collector's (a collector may publish a second kind, e.g. summaries);
    ``max_delay_s`` is how long the records may wait to be batched (default: the agent's ``batch_max_delay_s``)."""

    def __call__(
        self,
        records: Sequence[Record],
        on_ack: Callable[[], None] | None = None,
        kind: str | None = None,
        ttl: float | None = None,
        max_delay_s: float | None = None,
    ) -> Awaitable[None]: ...


class CollectorUnavailable(RanksightError):
    """Raised by ``detect`` or ``collect`` when the source is not on this node (reported as ``absent``)."""


MAX_ERROR_CHARS = 300


def heartbeat_text(text: str | None) -> str | None:
    """Error text fit for the heartbeat: printable ASCII on one line, bounded. Errors often quote what a peer sent
    (a RAS reply, a client message); its raw bytes, control characters included, never go out as they came."""
    if text is None:
        return None
    clean = "".join(c if " " <= c <= "~" else "?" for c in text[: MAX_ERROR_CHARS + 1])
    return clean if len(clean) <= MAX_ERROR_CHARS else clean[: MAX_ERROR_CHARS - 3] + "..."


@dataclass
class Health:
    name: str
    state: str = "starting"
    source: str | None = None
    last_success_ns: int | None = None
    last_error: str | None = None
    last_duration_s: float | None = None
    runs: int = 0
    errors: int = 0

    def success(self, duration_s: float) -> None:
        self.state, self.runs, self.last_success_ns = "ok", self.runs + 1, time.time_ns()
        self.last_duration_s = duration_s

    def failure(self, error: BaseException, duration_s: float | None = None) -> None:
        self.state, self.runs, self.errors = "error", self.runs + 1, self.errors + 1
        self.last_error = f"{type(error).__name__}: {error}"[:500]
        self.last_duration_s = duration_s

    def running(self) -> None:
        """A streaming collector (re)started: ``ok``, unless it failed before, which only a real success clears."""
        if self.state != "error":
            self.state = "ok"

    def snapshot(self) -> CollectorHealth:
        return msgspec.convert(
            {**self.__dict__, "last_error": heartbeat_text(self.last_error)}, CollectorHealth
        )


class Collector(ABC):
    """Common part of both shapes. ``kind`` is the event kind its records are published as."""

    name: ClassVar[str]
    kind: ClassVar[str]
    # Durable kinds are never dropped by the publisher (backpressure instead); gauges may be, and drops are counted.
    durable: ClassVar[bool] = False

    def __init__(self, ctx: AgentContext, settings: CollectorSettings) -> None:
        self.ctx = ctx
        self.settings = settings
        self.health = Health(self.name)

    @property
    def ttl(self) -> float:
        return self.settings.ttl()

    async def detect(self) -> bool:
        """Whether the source exists on this node. Default: always."""
        return True

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources at shutdown."""


class PolledCollector(Collector):
    @abstractmethod
    async def collect(self) -> Sequence[Record]: ...


class StreamingCollector(Collector):
    @abstractmethod
    async def run(self, emit: Emit) -> None: ...
