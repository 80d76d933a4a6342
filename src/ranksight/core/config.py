"""Typed configuration: a TOML file, ``RANKSIGHT_`` environment variables and command-line flags, unknown keys rejected.

Precedence (:func:`load_root`): flags (its overrides) win over the environment, which wins over the file.
``Settings(**values)`` is those values alone, on the defaults.

Each component declares its own sections beside its code (``ranksight.agent.collectors.ras.settings``:
``[agent.collectors.ras]``) and a view, the part of the settings its process reads (``ranksight.agent.settings.AgentView``);
the root that composes them all, :class:`ranksight.settings.Settings`, sits above every component. Here: what every
one shares: the loader (generic over the root), :class:`Section`, the NATS connection's section and the top-level keys
(:class:`CommonSettings`).

Nested keys use ``__`` in the environment: ``RANKSIGHT_NATS__URL``, ``RANKSIGHT_AGENT__COLLECTORS__GPU__INTERVAL_S``;
the value of a list, a table or a section is JSON (``RANKSIGHT_DEPLOY__PIP_OPTIONS='["--no-index"]'``). The file comes
from ``--config``, else ``$RANKSIGHT_CONFIG``; with neither, the defaults work on one machine.
"""

from __future__ import annotations

import json
import os
import tomllib
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

import msgspec
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError

from ranksight.client import SOCKET_ENV as APP_SOCKET_ENV
from ranksight.errors import UsageError

CONFIG_ENV = "RANKSIGHT_CONFIG"
ENV_PREFIX = "RANKSIGHT_"
# RANKSIGHT_* variables that are read elsewhere and are not settings.
NON_SETTING_ENV = frozenset({CONFIG_ENV})
NON_SETTING_ENV |= {APP_SOCKET_ENV}  # read by training processes (ranksight.client), not a setting


class ConfigError(UsageError, ValueError):
    """The configuration file or environment is invalid; the message names the offending key."""


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class NatsSettings(Section):
    url: str = Field("nats://127.0.0.1:4222", description="comma-separated server URLs")
    user: str | None = None
    password: SecretStr | None = None
    token: SecretStr | None = None
    nkey_seed_file: Path | None = None
    creds_file: Path | None = None
    tls_ca_file: Path | None = None
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    connect_timeout_s: float = 5.0
    jetstream_ready_timeout_s: float = Field(
        60.0,
        gt=0,
        description="how long the aggregator retries creating its stream, buckets and consumers while JetStream does "
        "not answer yet (a cluster still electing leaders)",
    )
    jetstream_replicas: int = Field(
        1,
        ge=1,
        le=5,
        description="copies of the event stream and KV buckets kept by a JetStream cluster (3 on a 3-server "
        "cluster survives the loss of any one server); 1 on a single server",
    )
    inbox_prefix: str = Field(
        "_INBOX",
        pattern=r"^[A-Za-z0-9_$-]+(\.[A-Za-z0-9_$-]+)*$",
        description="prefix of this client's reply subjects; one per NATS user (e.g. _INBOX.gpu-node-001) lets "
        "the server's permissions confine each user to its own replies",
    )


class CommonSettings(Section):
    """The top-level keys, which every process reads; each component's view adds its own sections to these."""

    cluster: str = "default"
    subject_prefix: str = "ranksight.v1"
    state_dir: Path = Field(Path.home() / ".local/state/ranksight", description="all local state lives here")
    log_level: str = "INFO"
    shutdown_timeout_s: float = Field(
        10.0,
        gt=0,
        description="after SIGINT/SIGTERM, how long a long-running command may take to stop in order",
    )
    nats: NatsSettings = NatsSettings()
    api_url: str | None = Field(
        None,
        pattern=r"^https?://",
        description="the aggregator's HTTP API (e.g. http://aggregator:8080), asked by the read-only query commands "
        "instead of NATS, with aggregator.http.token as the bearer token; unset: every command asks over NATS",
    )


View = TypeVar("View", bound=CommonSettings)


def _encode_value(value: Any) -> Any:
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    if isinstance(value, Path):
        return str(value)
    raise NotImplementedError(f"cannot encode {type(value).__name__}")


def encode_settings(settings: CommonSettings, view: type[CommonSettings]) -> bytes:
    """Validated settings as JSON, secrets included, for another process (:func:`decode_settings`): the keys of
    ``view`` only, the part of the settings that process reads."""
    return msgspec.json.encode(settings.model_dump(include=set(view.model_fields)), enc_hook=_encode_value)


def decode_settings(view: type[View], data: bytes) -> View:
    """Settings from :func:`encode_settings`: validated again, from these values only (no file, no environment)."""
    return view.model_validate_json(data)


def _explain(exc: ValidationError, origin: str) -> str:
    lines = []
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"])
        if err["type"] == "extra_forbidden":
            lines.append(f"unknown setting {key!r} in {origin}")
        else:
            lines.append(f"setting {key!r}: {err['msg']}")
    return "; ".join(lines)


def load_root(root: type[View], path: str | os.PathLike[str] | None = None, **overrides: Any) -> View:
    """Load the file (if any), apply the environment on top, then explicit ``overrides`` (command-line flags), into
    ``root``: every key of the file and the environment must be one of its."""
    path = path or os.environ.get(CONFIG_ENV)
    data: dict[str, Any] = {}
    origin = "the environment"
    if path:
        origin = f"{path} or the environment"
        try:
            data = tomllib.loads(Path(path).read_text())
        except FileNotFoundError:
            raise ConfigError(f"config file not found: {path}") from None
        except (OSError, UnicodeDecodeError) as exc:  # a directory, no permission, not text
            raise ConfigError(
                f"cannot read config file {path}: {getattr(exc, 'strerror', None) or exc}"
            ) from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    try:
        return root.model_validate(_merged(_merged(data, _environment(root)), overrides))
    except ValidationError as exc:
        raise ConfigError(_explain(exc, origin)) from None


def _environment(root: type[BaseModel]) -> dict[str, Any]:
    """The ``RANKSIGHT_`` variables as nested values (names are not case-sensitive; ``__`` descends a section). An
    unknown name is an error, not ignored: a mistyped variable must fail loudly."""
    values: dict[str, Any] = {}
    for name, text in os.environ.items():
        upper = name.upper()
        if not upper.startswith(ENV_PREFIX) or upper in NON_SETTING_ENV:
            continue
        *parents, leaf = keys = upper.removeprefix(ENV_PREFIX).lower().split("__")
        model: type[BaseModel] | None = root
        annotation: Any = None
        for depth, key in enumerate(keys):
            if model is None:  # below a table (a dict field): its keys are free
                annotation = None
                break
            field = model.model_fields.get(key)
            if field is None:
                raise ConfigError(f"unknown setting {key!r} in environment variable {name}")
            annotation = field.annotation
            model = _section(annotation) if depth < len(keys) - 1 else None
        target = values
        for key in parents:
            target = target.setdefault(key, {})
        target[leaf] = _env_value(name, text, annotation)
    return values


def _arms(annotation: Any) -> tuple[Any, ...]:
    """``X | None`` -> ``(X,)``; ``X`` -> ``(X,)``."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return tuple(a for a in typing.get_args(annotation) if a is not type(None))
    return (annotation,)


def _section(annotation: Any) -> type[BaseModel] | None:
    """The section model a field holds, or None (a value, or a table of them)."""
    found = [a for a in _arms(annotation) if isinstance(a, type) and issubclass(a, BaseModel)]
    return found[0] if found else None


def _env_value(name: str, text: str, annotation: Any) -> Any:
    """A variable's text as the setting takes it: JSON for a list, a table or a section, else the text itself (the
    model parses numbers, booleans and paths from text)."""
    structured = any(_section(a) or typing.get_origin(a) in (list, dict, tuple, set) or a in (list, dict)
                     for a in _arms(annotation))  # fmt: skip
    if not structured:
        return text
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ConfigError(
            f"environment variable {name} is not JSON (a list, table or section is): {exc}"
        ) from None


def _merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` on top of ``base``, table by table (a value in ``over`` replaces the one in ``base``)."""
    out = dict(base)
    for key, value in over.items():
        below = out.get(key)
        out[key] = _merged(below, value) if isinstance(below, dict) and isinstance(value, dict) else value
    return out
