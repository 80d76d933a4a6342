"""The agent process reads its settings as twins (ranksight/settings_twins.py): every value survives the trip from the
validated pydantic settings, secrets stay secret, and what settings derive is the same for both forms."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from ranksight.core.config import CollectorsSettings, load_settings, twin_settings
from ranksight.core.secret import Secret


def _settings(tmp_path: Path):  # type: ignore[no-untyped-def]
    return load_settings(None, state_dir=tmp_path, cluster="prod-a", nats={"password": "hunter2", "token": "tok-1"},
                         agent={"node": "gpu-017", "collectors": {"inspector": {"dump_dir": str(tmp_path / "dumps"),
                                                                                "summary_window_s": 10.0},
                                                              "gpu": {"ttl_s": 7.0}}})  # fmt: skip


def _plain(value: object) -> object:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, Secret):
        return value.get_secret_value()
    raise NotImplementedError


def test_every_value_survives(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    twin = twin_settings(settings)
    expected = settings.model_dump()
    expected["nats"]["password"], expected["nats"]["token"] = "hunter2", "tok-1"
    assert msgspec.to_builtins(twin, enc_hook=_plain) == msgspec.to_builtins(expected, enc_hook=_plain)
    assert isinstance(twin.state_dir, Path) and twin.agent.collectors.inspector.dump_dir == tmp_path / "dumps"


def test_secrets_stay_hidden(tmp_path: Path) -> None:
    twin = twin_settings(_settings(tmp_path))
    assert twin.nats.password is not None and twin.nats.password.get_secret_value() == "hunter2"
    assert "hunter2" not in repr(twin) and "tok-1" not in str(twin.nats)


def test_what_settings_derive_is_the_same_for_both_forms(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    twin = twin_settings(settings)
    for name in CollectorsSettings.model_fields:
        assert getattr(twin.agent.collectors, name).ttl() == getattr(settings.agent.collectors, name).ttl(), (
            name
        )
    assert (
        twin.agent.collectors.inspector.summary_ttl()
        == settings.agent.collectors.inspector.summary_ttl()
        == 22.5
    )
    assert twin.app_socket_path() == settings.app_socket_path() == tmp_path / "app.sock"


def test_the_twins_are_frozen(tmp_path: Path) -> None:
    twin = twin_settings(_settings(tmp_path))
    with pytest.raises(AttributeError):
        twin.cluster = "other"  # type: ignore[misc]
