"""What a query endpoint is to its callers: one :class:`EndpointSpec` (name, parameter model, CLI presentation), from
which the ``ranksight`` query command, the NATS subject and the OpenAPI path are derived (the declarations are in
:mod:`ranksight.api.endpoints`; the aggregator binds a handler to each in :mod:`ranksight.aggregator.api.endpoints`).

The parameter model is the single validation of parameters: the NATS body and the HTTP query string go through
:func:`parse_params` on the server, and the command line builds its flags from the same model. Nothing here imports
the server: a query command loads this, the client and the settings, not DuckDB, pyarrow, numpy or the aggregator.
"""

from __future__ import annotations

import argparse
import datetime
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from ranksight.errors import UsageError
from ranksight.schemas.api import ApiResponse

if TYPE_CHECKING:
    from ranksight.api.settings import ApiView


class RequestError(UsageError, ValueError):
    """A request the endpoint cannot answer as asked (bad parameter); answered with ok=false and code 400."""


class Params(BaseModel):
    """Base of every endpoint's parameters: unknown keys are an error, not silently ignored. Each model's validator is
    built when first used, not at import: a query command reads only the fields, to make its flags."""

    model_config = ConfigDict(extra="forbid", defer_build=True)


class ClusterParams(Params):
    cluster: str | None = None


class DeviceParams(Params):
    cluster: str | None = None
    node: str | None = None


P = TypeVar("P", bound=Params)


def parse_params(model: type[P], params: dict[str, Any]) -> P:
    """Validate a request body into ``model``; a :class:`RequestError` naming each bad parameter otherwise."""
    try:
        return model.model_validate(params)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            key = ".".join(str(p) for p in err["loc"]) or "body"
            problems.append(
                f"unknown parameter {key!r}" if err["type"] == "extra_forbidden" else f"{key}: {err['msg']}"
            )
        raise RequestError("; ".join(problems)) from None


DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def duration(text: str) -> float:
    """``90``, ``90s``, ``15m``, ``1h``, ``2d``, ``1h30m`` -> seconds (an argparse type)."""
    text = text.strip()
    if not re.fullmatch(r"(\d+(\.\d+)?[smhdw]?)+", text):
        raise argparse.ArgumentTypeError(f"not a duration (e.g. 90s, 15m, 1h, 2d): {text!r}")
    seconds = sum(
        float(n) * DURATION_UNITS[u or "s"] for n, u in re.findall(r"(\d+(?:\.\d+)?)([smhdw]?)", text)
    )
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"the duration must be positive: {text!r}")
    return seconds


def ago(text: str) -> str:
    """``1h`` -> the ISO time one hour ago (an argparse type for ``--since AGO``)."""
    return (datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=duration(text))).isoformat()


def timestamp(text: str) -> str:
    """An ISO-8601 date or time, checked (an argparse type)."""
    try:
        return datetime.datetime.fromisoformat(text).isoformat()
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO-8601 date or time: {text!r}") from None


@dataclass(frozen=True)
class Flag:
    """How one parameter is given on the command line, where the default (``--name-with-dashes``, type, choices and
    whether it is required from the model, the field's description as help) does not fit."""

    names: tuple[str, ...] = ()  # option strings
    positional: bool = False
    type: Callable[[str], Any] | None = None
    help: str | None = None
    metavar: str | None = None
    const: Any = None  # a flag that sets this value (``--all`` for ``state=all``)
    default: Any = (
        None  # what the command sends when the flag is not given (nor another of its exclusive group)
    )


Rows = list[dict[str, Any]]


@dataclass(frozen=True)
class Command:
    """The CLI presentation of an endpoint: ``ranksight <path>`` prints ``columns`` of the rows as a table (numbers in
    human units by column name), or with ``--json`` the one response shape plus ``json_keys`` (the keys the command's
    JSON carried before the shape was one; kept so that scripts keep working)."""

    help: str
    columns: Sequence[str] = ()  # empty: the answer's meta.columns (sql)
    path: tuple[str, ...] = ()  # default: the endpoint's name, ``_`` as ``-``
    flags: dict[str, Flag] = field(default_factory=dict)
    exclusive: tuple[str, ...] = ()  # parameters given one at a time
    csv: bool = False
    json_keys: Callable[[ApiResponse], dict[str, Any]] | None = None
    table_rows: Callable[[Rows], Rows] | None = None
    notes: Callable[[argparse.Namespace, ApiResponse], Iterable[str]] | None = (
        None  # stderr lines after the rows
    )
    extend: Callable[[argparse.ArgumentParser], None] | None = None  # CLI-only flags
    instead: Callable[[argparse.Namespace], int | None] | None = (
        None  # runs first; an exit code ends the command
    )
    # a history command: with ``--db FILE`` it answers offline from a history file (the commands floor adds the flag,
    # ranksight.commands.queries)
    history: bool = False


@dataclass(frozen=True)
class EndpointSpec(Generic[P]):
    """One query endpoint as its callers see it. ``http``: also on the HTTP API (read-only endpoints; those that change
    state or write files stay on NATS). ``sql_time``: it may take the whole SQL time limit, so clients wait that
    long."""

    name: str
    params: type[P]
    command: Command
    http: bool = True
    sql_time: bool = False
    wait_s: Callable[[ApiView], float] | None = None  # how long a client waits, when not the usual

    @property
    def command_path(self) -> tuple[str, ...]:
        return self.command.path or (self.name.replace("_", "-"),)
