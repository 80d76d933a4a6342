from __future__ import annotations

from pathlib import Path

import pytest

from ranksight.cli import build_parser
from ranksight.core.cliutil import settings_from_args
from ranksight.core.config import ConfigError
from ranksight.settings import Settings, load_settings


def test_defaults_work_without_a_file() -> None:
    s = load_settings()
    assert s.nats.url.startswith("nats://") and s.cluster == "default"
    assert s.agent.collectors.heartbeat.ttl() == 15.0


def test_unknown_key_in_file_is_named(tmp_path: Path) -> None:
    f = tmp_path / "c.toml"
    f.write_text("[agent]\nbatch_max_recrods = 5\n")
    with pytest.raises(ConfigError, match=r"unknown setting 'agent\.batch_max_recrods'"):
        load_settings(f)


def test_unknown_environment_variable_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANKSIGHT_NATS__URLL", "nats://x:1")
    with pytest.raises(ConfigError, match="RANKSIGHT_NATS__URLL"):
        load_settings()


def test_environment_overrides_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "c.toml"
    f.write_text(
        'cluster = "from-file"\n[nats]\nurl = "nats://file:4222"\n[agent.collectors.gpu]\ninterval_s = 9\n'
    )
    monkeypatch.setenv("RANKSIGHT_NATS__URL", "nats://env:4222")
    monkeypatch.setenv("RANKSIGHT_CONFIG", str(f))
    s = load_settings()
    assert (s.cluster, s.nats.url, s.agent.collectors.gpu.interval_s) == ("from-file", "nats://env:4222", 9.0)


def test_bad_value_and_bad_toml(tmp_path: Path) -> None:
    f = tmp_path / "c.toml"
    f.write_text("[agent]\nbatch_max_records = -1\n")
    with pytest.raises(ConfigError, match=r"agent\.batch_max_records"):
        load_settings(f)
    f.write_text("cluster = \n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_settings(f)
    with pytest.raises(ConfigError, match="not found"):
        load_settings(tmp_path / "missing.toml")


def test_secrets_are_not_printed(tmp_path: Path) -> None:
    f = tmp_path / "c.toml"
    f.write_text('[nats]\npassword = "hunter2"\ntoken = "tok-123"\n')
    s = load_settings(f)
    assert "hunter2" not in repr(s) and "tok-123" not in str(s.model_dump())
    assert s.nats.password is not None and s.nats.password.get_secret_value() == "hunter2"


def test_flags_override_environment_which_overrides_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    f = tmp_path / "c.toml"
    f.write_text(
        'cluster = "file"\n[agent]\nnode = "file-node"\nbatch_max_records = 7\n'
        '[aggregator]\ndb_path = "/file.duckdb"\nfetch_batch = 11\n[deploy]\nparallel = 3\n'
    )
    for name, value in [("CLUSTER", "env"), ("AGENT__NODE", "env-node"), ("AGGREGATOR__DB_PATH", "/env.duckdb"),
                        ("AGGREGATOR__FETCH_BATCH", "12"), ("DEPLOY__PARALLEL", "4")]:  # fmt: skip
        monkeypatch.setenv(f"RANKSIGHT_{name}", value)
    s = load_settings(f, cluster="flag", agent={"node": "flag-node"}, aggregator={"db_path": "/flag.duckdb"},
                      deploy={"parallel": 5})  # fmt: skip
    flagged = (s.cluster, s.agent.node, s.db_path(), s.deploy.parallel)
    assert flagged == ("flag", "flag-node", Path("/flag.duckdb"), 5)
    # keys no flag names keep the environment's value, else the file's
    assert (s.aggregator.fetch_batch, s.agent.batch_max_records) == (12, 7)


@pytest.mark.parametrize(
    "argv",
    [
        ["status", "--nats", "nats://flag:1"],
        ["sql", "--nats", "nats://flag:1", "SELECT 1"],
        ["agent", "--nats", "nats://flag:1"],
        ["aggregator", "--nats", "nats://flag:1"],
    ],
)
def test_nats_flag_wins_over_environment(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANKSIGHT_NATS__URL", "nats://env:2")
    monkeypatch.setenv("RANKSIGHT_NATS__USER", "env-user")
    s = settings_from_args(build_parser().parse_args(argv), Settings)
    assert (s.nats.url, s.nats.user) == ("nats://flag:1", "env-user")


def test_ingest_waits_for_the_straggler_engine_before_its_queue_drops_records(tmp_path: Path) -> None:
    f = tmp_path / "c.toml"
    f.write_text("[aggregator.stragglers]\nmax_records = 100000\ningest_waits_at_records = 100000\n")
    with pytest.raises(ConfigError, match="ingest_waits_at_records must be below max_records"):
        load_settings(f)
    f.write_text("[aggregator.stragglers]\nmax_records = 100000\ningest_waits_at_records = 99999\n")
    assert load_settings(f).aggregator.stragglers.ingest_waits_at_records == 99_999


def test_environment_values_of_lists_tables_and_sections_are_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANKSIGHT_DEPLOY__PIP_OPTIONS", '["--no-index", "--find-links=/w"]')
    monkeypatch.setenv(
        "ranksight_aggregator__alerts__rules__node_silent__for_s", "7"
    )  # names are not case-sensitive
    monkeypatch.setenv("RANKSIGHT_AGENT__COLLECTORS__GPU", '{"interval_s": 3}')
    monkeypatch.setenv("RANKSIGHT_AGENT__COLLECTORS__NIC__ENABLED", "false")
    settings = load_settings()
    assert settings.deploy.pip_options == ["--no-index", "--find-links=/w"]
    assert settings.aggregator.alerts.rules["node_silent"].for_s == 7
    assert settings.agent.collectors.gpu.interval_s == 3 and settings.agent.collectors.nic.enabled is False
    monkeypatch.setenv("RANKSIGHT_DEPLOY__PIP_OPTIONS", "--no-index")
    with pytest.raises(ConfigError, match="RANKSIGHT_DEPLOY__PIP_OPTIONS is not JSON"):
        load_settings()
