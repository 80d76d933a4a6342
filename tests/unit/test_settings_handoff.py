"""``ranksight agent`` hands its validated settings to the agent process as JSON (``encode_settings``, read back by
``decode_settings``): the agent's view of them (the top-level keys and ``[agent]``), every value of which survives the
trip, secrets included and still hidden, and only those values count (neither the environment nor a config file of
the agent process)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ranksight.agent.settings import AgentView
from ranksight.core.config import decode_settings, encode_settings
from ranksight.settings import load_settings


def _settings(tmp_path: Path):  # type: ignore[no-untyped-def]
    return load_settings(None, state_dir=tmp_path, cluster="prod-a", nats={"password": "hunter2", "token": "tok-1"},
                         agent={"node": "gpu-017", "collectors": {"inspector": {"dump_dir": str(tmp_path / "dumps"),
                                                                                "summary_window_s": 10.0},
                                                              "gpu": {"ttl_s": 7.0}}})  # fmt: skip


def test_every_value_survives(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    read = decode_settings(AgentView, encode_settings(settings, AgentView))
    assert read.model_dump() == settings.model_dump(include=set(AgentView.model_fields))
    assert isinstance(read.state_dir, Path) and read.agent.collectors.inspector.dump_dir == tmp_path / "dumps"
    assert read.agent.collectors.gpu.ttl() == 7.0 and read.agent.collectors.inspector.summary_ttl() == 22.5


def test_the_agent_process_gets_its_view_alone(tmp_path: Path) -> None:
    """Not the aggregator's sections and their secrets (aggregator.http.token, the webhook's secret), nor deploy's."""
    settings = load_settings(None, aggregator={"http": {"token": "tk-1"}})
    data = encode_settings(settings, AgentView)
    assert set(json.loads(data)) == set(AgentView.model_fields) and b"tk-1" not in data


def test_secrets_survive_and_stay_hidden(tmp_path: Path) -> None:
    read = decode_settings(AgentView, encode_settings(_settings(tmp_path), AgentView))
    assert read.nats.password is not None and read.nats.password.get_secret_value() == "hunter2"
    assert "hunter2" not in repr(read) and "tok-1" not in str(read.nats)


def test_only_the_handed_values_count(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = encode_settings(_settings(tmp_path), AgentView)
    monkeypatch.setenv("RANKSIGHT_CLUSTER", "from-the-environment")
    monkeypatch.setenv("RANKSIGHT_CONFIG", str(tmp_path / "absent.toml"))
    assert decode_settings(AgentView, data).cluster == "prod-a"
