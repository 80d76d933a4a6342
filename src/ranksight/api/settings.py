"""What the query client reads of the settings (:class:`ApiView`): the top-level keys, and three values of the
aggregator's section, declared in ``ranksight.aggregator`` (a floor above): the HTTP API's bearer token and the time
limits the client waits out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from pydantic import SecretStr

from ranksight.core.config import CommonSettings


class _Http(Protocol):
    @property
    def token(self) -> SecretStr | None: ...


class _Query(Protocol):
    @property
    def sql_time_limit_s(self) -> float: ...


class _HangForensics(Protocol):
    @property
    def request_timeout_s(self) -> float: ...


class AggregatorSide(Protocol):
    """The part of ``[aggregator]`` the query client reads."""

    @property
    def http(self) -> _Http: ...
    @property
    def query(self) -> _Query: ...
    @property
    def hang_forensics(self) -> _HangForensics: ...


class ApiView(CommonSettings):
    """What the query commands and their client read: the top-level keys and a little of ``[aggregator]``
    (:class:`AggregatorSide`), which the aggregator's view declares (:class:`ranksight.aggregator.settings.AggregatorView`;
    the type checker holds its ``aggregator`` to this shape)."""

    if TYPE_CHECKING:
        aggregator: AggregatorSide
