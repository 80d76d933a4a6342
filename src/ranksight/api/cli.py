"""The query commands, derived from the endpoint declarations (:mod:`ranksight.api.endpoints`): ``ranksight <endpoint>``
(``node drain``, ``silence add``... for the grouped ones) with a flag per parameter of the endpoint's model.

A query command asks the running aggregator's NATS service (its HTTP API for a read-only endpoint when setting
``api_url`` names it) and prints rows as a table (default) or, with ``--json``,
the one response shape ``{"ok", "rows", "truncated", "error", "meta", "next", "partial", "missing_shards"}`` (plus the
keys the command's JSON carried before, such as ``jobs``). Data goes to stdout, errors to stderr; exit 0 on success, 1 when the aggregator
refuses or fails the query (or does not answer), 2 on usage errors.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import sys
import types
import typing
from typing import Any, Literal, TypeAlias

from pydantic.fields import FieldInfo

from ranksight.api.client import ApiUnavailable, MalformedAnswer, query, query_http
from ranksight.api.contract import EndpointSpec, Flag, timestamp
from ranksight.api.endpoints import COMMAND_GROUPS, SPECS
from ranksight.api.settings import ApiView
from ranksight.core.cliutil import (
    EXIT_FAILED,
    EXIT_OK,
    add_config_flags,
    print_csv,
    print_json,
    print_line,
    print_table,
    settings_from_args,
)
from ranksight.core.websocket_transport import allow_websocket_transport, skip_websocket_transport
from ranksight.schemas.api import ApiResponse

SubParsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
JSON_HELP = 'print {"ok", "rows", "truncated", "error", "meta", "next", "partial", "missing_shards"}'


def register(sub: SubParsers) -> None:
    groups: dict[str, SubParsers] = {}
    for endpoint in SPECS.values():
        *group, name = endpoint.command_path
        target = sub
        if group:  # one level: ``ranksight node drain``
            (parent,) = group
            if parent not in groups:
                actions = sub.add_parser(parent, help=COMMAND_GROUPS[parent])
                groups[parent] = actions.add_subparsers(
                    dest=f"{parent}_command", required=True, metavar="ACTION"
                )
            target = groups[parent]
        add_endpoint_command(target, name, endpoint)


def add_endpoint_command(sub: SubParsers, name: str, endpoint: EndpointSpec[Any]) -> None:
    """``ranksight <name> [flags] [--json]``: a flag per parameter of the endpoint's model."""
    command = endpoint.command
    p = sub.add_parser(name, help=command.help)
    add_config_flags(p)
    output = p.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help=JSON_HELP)
    if command.csv:
        output.add_argument("--csv", action="store_true", help="CSV with a header line")
    exclusive = p.add_mutually_exclusive_group() if command.exclusive else None
    for field, info in endpoint.params.model_fields.items():
        target = exclusive if exclusive is not None and field in command.exclusive else p
        _add_param(target, field, info, command.flags.get(field, Flag()))
    if command.extend:
        command.extend(p)
    p.set_defaults(func=functools.partial(run_command, endpoint))


def _add_param(parser: Any, field: str, info: FieldInfo, flag: Flag) -> None:
    """One parameter as an argparse argument: its type and choices from the model, unless ``flag`` says otherwise."""
    kind = _kind(info.annotation)
    names = flag.names or (f"--{field.replace('_', '-')}",)
    kw: dict[str, Any] = {"help": flag.help or info.description or _help(field, info.default)}
    if flag.const is not None:
        kw.update(action="store_const", const=flag.const)
    elif kind is bool:
        kw.update(action="store_true", default=None)
    elif typing.get_origin(kind) is list:
        kw.update(nargs="+") if flag.positional else kw.update(action="append")
    elif typing.get_origin(kind) is Literal:
        kw["choices"] = list(typing.get_args(kind))
    else:
        kw["type"] = flag.type or _PARSERS.get(kind, str)
    if kw.get("action") in (None, "append") and "choices" not in kw:  # takes a value: name it
        kw["metavar"] = flag.metavar or names[0].lstrip("-").upper().replace("-", "_")
    if flag.positional:
        parser.add_argument(field, **kw)
        return
    parser.add_argument(*names, dest=field, required=info.is_required(), **kw)


def _help(field: str, default: Any) -> str:
    return f"only this {field.replace('_', ' ')}" if default is None else f"default: {default}"


_PARSERS: dict[Any, Any] = {int: int, float: float, datetime.datetime: timestamp}


def _kind(annotation: Any) -> Any:
    """``X | None`` -> ``X``."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        (annotation,) = [a for a in typing.get_args(annotation) if a is not type(None)]
    return annotation


def command_params(endpoint: EndpointSpec[Any], args: argparse.Namespace) -> dict[str, Any]:
    """The request body: the parameters given, and the command's defaults for those not given."""
    command = endpoint.command
    fields = list(endpoint.params.model_fields)
    given = {f: getattr(args, f) for f in fields if getattr(args, f, None) is not None}
    for field in fields:
        default = command.flags.get(field, Flag()).default
        other_given = field in command.exclusive and any(f in given for f in command.exclusive)
        if field not in given and default is not None and not other_given:
            given[field] = default
    return given


def run_command(endpoint: EndpointSpec[Any], args: argparse.Namespace) -> int:
    if endpoint.command.instead and (code := endpoint.command.instead(args)) is not None:
        return code
    response = call_api(args, endpoint.name, command_params(endpoint, args))
    if response is None:
        return EXIT_FAILED
    try:
        print_rows(args, response, endpoint)
    except MalformedAnswer as exc:
        print_line(f"ranksight: {exc}", sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def call_api(
    args: argparse.Namespace, endpoint: str, params: dict[str, Any] | None = None
) -> ApiResponse | None:
    """The aggregator's answer, or None after printing why there is none (unreachable, refused, failed)."""
    settings = settings_from_args(args, ApiView)
    # An endpoint that may use the whole SQL time limit on the server: wait a little longer than that.
    timeout = settings.aggregator.query.sql_time_limit_s + 5 if SPECS[endpoint].sql_time else 10.0
    if (wait_s := SPECS[endpoint].wait_s) is not None:
        timeout = wait_s(settings)
    try:
        if settings.api_url is not None and SPECS[endpoint].http:
            response = query_http(settings, endpoint, params, timeout=timeout)
        else:
            import asyncio  # the NATS client's loop; an answer over HTTP needs none

            skipped = skip_websocket_transport(settings.nats.url)
            try:
                response = asyncio.run(query(settings, endpoint, params, timeout=timeout))
            finally:
                if skipped:
                    allow_websocket_transport()
    except ApiUnavailable as exc:
        print_line(f"ranksight: {exc}", sys.stderr)
        return None
    if not response.ok:
        print_line(f"ranksight: {response.error}", sys.stderr)
        return None
    return response


def print_rows(args: argparse.Namespace, response: ApiResponse, endpoint: EndpointSpec[Any]) -> None:
    command = endpoint.command
    if args.json:
        print_json({**response.model_dump(), **(command.json_keys(response) if command.json_keys else {})})
        return
    try:
        rows = command.table_rows(response.rows) if command.table_rows else response.rows
    except (TypeError, KeyError, AttributeError, ValueError) as exc:  # rows not of the endpoint's shape
        raise MalformedAnswer(f"malformed {endpoint.name} answer: {type(exc).__name__}: {exc}") from None
    columns = command.columns or response.meta.get("columns") or list(rows[0] if rows else [])
    (print_csv if getattr(args, "csv", False) else print_table)(rows, columns)
    if not rows:  # a header alone looks like a failure: say that the answer is empty
        print(f"ranksight: nothing to show ({' '.join(endpoint.command_path)}: 0 rows)", file=sys.stderr)
    for note in command.notes(args, response) if command.notes else []:
        print_line(f"ranksight: {note}", sys.stderr)
    if response.truncated:
        print(f"ranksight: output truncated at {len(response.rows)} rows", file=sys.stderr)
    if response.partial:
        missing = ", ".join(response.missing_shards) or "unknown (the shard membership could not be read)"
        print_line(f"ranksight: partial answer: shards that did not answer: {missing}", sys.stderr)
