"""Typed configuration: a TOML file plus ``RANKSIGHT_`` environment variables (env wins), unknown keys rejected.

Nested keys use ``__`` in the environment: ``RANKSIGHT_NATS__URL``, ``RANKSIGHT_AGENT__COLLECTORS__GPU__INTERVAL_S``.
The file comes from ``--config``, else ``$RANKSIGHT_CONFIG``; with neither, the defaults below work on one machine.
"""

from __future__ import annotations

import os
import socket
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

CONFIG_ENV = "RANKSIGHT_CONFIG"
# RANKSIGHT_* variables that are read elsewhere and are not settings.
NON_SETTING_ENV = frozenset({CONFIG_ENV})


class ConfigError(ValueError):
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


class CollectorSettings(Section):
    enabled: bool = True
    interval_s: float = Field(5.0, gt=0)
    ttl_s: float | None = Field(None, gt=0, description="fact lifetime; default 3 x interval")

    def ttl(self) -> float:
        return self.ttl_s if self.ttl_s is not None else 3 * self.interval_s


class HeartbeatSettings(CollectorSettings):
    interval_s: float = Field(5.0, gt=0)


class RasSettings(CollectorSettings):
    interval_s: float = Field(10.0, gt=0)


class InspectorSettings(CollectorSettings):
    interval_s: float = Field(1.0, gt=0, description="how often the dump directory is re-scanned when idle")
    dump_dir: Path | None = Field(
        None, description="the plugin's NCCL_INSPECTOR_DUMP_DIR; unset or missing: the collector is absent"
    )
    read_chunk_bytes: int = Field(1 << 20, ge=4096, description="most bytes read from one file per pass")


class GpuSettings(CollectorSettings):
    interval_s: float = Field(5.0, gt=0)


class NicSettings(CollectorSettings):
    interval_s: float = Field(2.0, gt=0)


class ProbeSettings(CollectorSettings):
    interval_s: float = Field(60.0, gt=0)


class CollectorsSettings(Section):
    heartbeat: HeartbeatSettings = HeartbeatSettings()
    ras: RasSettings = RasSettings()
    inspector: InspectorSettings = InspectorSettings()
    gpu: GpuSettings = GpuSettings()
    nic: NicSettings = NicSettings()
    probe: ProbeSettings = ProbeSettings()


class AgentSettings(Section):
    node: str = Field(default_factory=socket.gethostname, description="node name; default: hostname")
    batch_max_records: int = Field(2000, ge=1)
    batch_max_bytes: int = Field(512 * 1024, ge=1024, description="keep below the server's max_payload")
    batch_max_delay_s: float = Field(0.25, gt=0)
    queue_max_messages: int = Field(10_000, ge=1, description="publisher queue bound; gauges drop beyond it")
    max_inflight: int = Field(512, ge=1, description="unacknowledged JetStream publishes at once")
    publish_timeout_s: float = Field(5.0, gt=0)
    collectors: CollectorsSettings = CollectorsSettings()


class StragglerSettings(Section):
    """Online straggler analysis (design §6); the same engine as ``ranksight analyze inspector``."""

    window_s: float = Field(10.0, gt=0, description="analysis window over the records' dump timestamps")
    confirm_windows: int = Field(2, ge=1, description="consecutive windows a finding needs before it alerts")
    retain_windows: int = Field(6, ge=2, description="windows of records kept in memory and re-analyzed")
    evaluate_every_s: float = Field(
        5.0, gt=0, description="how often the engine runs (on tick, never per message)"
    )
    max_records: int = Field(
        2_000_000, ge=1000, description="records kept in memory at most (oldest dropped)"
    )


class AggregatorSettings(Section):
    db_path: Path | None = Field(None, description="DuckDB file; default <state_dir>/ranksight.duckdb")
    stream: str = "RANKSIGHT_EVENTS"
    durable: str = "ranksight-aggregator"
    stream_max_age_s: float = Field(7 * 24 * 3600, gt=0)
    stream_max_bytes: int = Field(10 * 1024**3, gt=0)
    duplicate_window_s: float = Field(300, gt=0)
    fetch_batch: int = Field(1000, ge=1)
    ack_wait_s: float = Field(60, gt=0)
    tick_s: float = Field(1.0, gt=0)
    node_gone_after_s: float = Field(
        300, gt=0, description="a silent node turns from stale to gone after this"
    )
    replay_window_s: float = Field(3600, gt=0, description="history replayed into live state at start")
    retention_days: float = Field(30, gt=0)
    stragglers: StragglerSettings = StragglerSettings.model_validate({})


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="RANKSIGHT_", env_nested_delimiter="__", extra="forbid", case_sensitive=False
    )

    cluster: str = "default"
    subject_prefix: str = "ranksight.v1"
    state_dir: Path = Field(Path.home() / ".local/state/ranksight", description="all local state lives here")
    log_level: str = "INFO"
    nats: NatsSettings = NatsSettings()
    agent: AgentSettings = AgentSettings()
    aggregator: AggregatorSettings = AggregatorSettings()

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # init holds the file's values: the environment goes first so that it overrides the file.
        return (env_settings, init_settings)

    def db_path(self) -> Path:
        return self.aggregator.db_path or self.state_dir / "ranksight.duckdb"


def _explain(exc: ValidationError, origin: str) -> str:
    lines = []
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"])
        if err["type"] == "extra_forbidden":
            lines.append(f"unknown setting {key!r} in {origin}")
        else:
            lines.append(f"setting {key!r}: {err['msg']}")
    return "; ".join(lines)


def load_settings(path: str | os.PathLike[str] | None = None, **overrides: Any) -> Settings:
    """Load the file (if any), apply the environment on top, then explicit ``overrides`` (command-line flags)."""
    path = path or os.environ.get(CONFIG_ENV)
    data: dict[str, Any] = {}
    origin = "the environment"
    if path:
        origin = f"{path} or the environment"
        try:
            data = tomllib.loads(Path(path).read_text())
        except FileNotFoundError:
            raise ConfigError(f"config file not found: {path}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    _check_env_keys()
    saved = os.environ.pop(CONFIG_ENV, None)  # the file pointer itself is not a setting
    try:
        settings = Settings(**data)
        if overrides:
            settings = Settings(**_deep_merge(settings.model_dump(exclude_unset=True), overrides))
    except ValidationError as exc:
        raise ConfigError(_explain(exc, origin)) from None
    finally:
        if saved is not None:
            os.environ[CONFIG_ENV] = saved
    return settings


def _deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def _check_env_keys() -> None:
    """pydantic-settings ignores unknown variables; a mistyped ``RANKSIGHT_`` variable must fail loudly instead."""
    for name in os.environ:
        upper = name.upper()
        if not upper.startswith("RANKSIGHT_") or upper in NON_SETTING_ENV:
            continue
        model: type[BaseModel] = Settings
        for part in upper.removeprefix("RANKSIGHT_").lower().split("__"):
            field = model.model_fields.get(part)
            if field is None:
                raise ConfigError(f"unknown setting {part!r} in environment variable {name}")
            annotation = field.annotation
            if isinstance(annotation, type) and issubclass(annotation, BaseModel):
                model = annotation
            else:
                break
