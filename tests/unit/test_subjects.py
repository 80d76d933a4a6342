from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ranksight.agent.runtime import AgentRuntime
from ranksight.agent.settings import AgentSettings
from ranksight.schemas.subjects import SubjectError, Subjects, require_token, sanitize_token
from ranksight.settings import load_settings
from tests.support import run_cli, settings_env


def test_event_subject_round_trip() -> None:
    s = Subjects()
    subject = s.event("prod", "gpu-node-01.cluster.local", "ras_event")
    assert subject == "ranksight.v1.ev.prod.gpu-node-01_cluster_local.ras_event"
    parsed = s.parse_event(subject)
    assert (parsed.cluster, parsed.node, parsed.kind) == ("prod", "gpu-node-01_cluster_local", "ras_event")


def test_alert_agent_api_subjects_and_custom_prefix() -> None:
    s = Subjects("acme.rs.v1")
    assert s.alert("c", "critical", "rank_missing") == "acme.rs.v1.alert.c.critical.rank_missing"
    assert s.parse_alert("acme.rs.v1.alert.c.critical.rank_missing").rule == "rank_missing"
    assert s.api("status") == "acme.rs.v1.api.status"
    assert s.shard_api("host.1", "status") == "acme.rs.v1.api.shard.host_1.status"  # one shard's own answer
    assert s.agent("c", "n*1", "probe") == "acme.rs.v1.agent.c.n_1.probe"
    assert s.events_filter() == "acme.rs.v1.ev.>"


@pytest.mark.parametrize("bad", ["ranksight.v1.ev.a.b", "other.v1.ev.a.b.c", "ranksight.v1.ev.a.b.c.d"])
def test_parse_rejects_other_shapes(bad: str) -> None:
    with pytest.raises(SubjectError):
        Subjects().parse_event(bad)


def test_invalid_prefix_rejected() -> None:
    with pytest.raises(SubjectError):
        Subjects("bad prefix.>")


@given(st.text())
def test_sanitized_tokens_are_always_one_safe_token(value: str) -> None:
    token = sanitize_token(value)
    assert token and all(c.isascii() and (c.isalnum() or c in "_-") for c in token)
    assert Subjects().parse_event(Subjects().event(value, value, value)).node == token


@pytest.mark.parametrize("name", ["gpu-node-001", "n_1", "A" * 128])
def test_names_that_are_tokens_are_accepted_as_they_stand(name: str) -> None:
    assert require_token("agent.node", name) == name


@pytest.mark.parametrize("name", ["a.b", "gpu01.example.com", "a b", " a", "", "n*", "A" * 129, "é"])
def test_names_sanitizing_would_change_are_refused(name: str) -> None:
    with pytest.raises(
        SubjectError, match=r"agent.node .* is not a subject token .* set agent.node to a token"
    ):
        require_token("agent.node", name)


def test_two_names_sanitizing_merges_cannot_both_run_an_agent(tmp_path: Path) -> None:
    assert sanitize_token("a.b") == sanitize_token("a_b") == "a_b"  # the collision: one subject for both
    settings = load_settings(None, state_dir=tmp_path, agent={"node": "a.b"})
    with pytest.raises(SubjectError, match=r"'a\.b' is not a subject token"):
        AgentRuntime(settings)
    with pytest.raises(SubjectError, match=r"cluster 'prod\.a'"):
        AgentRuntime(load_settings(None, state_dir=tmp_path, cluster="prod.a", agent={"node": "a_b"}))
    AgentRuntime(load_settings(None, state_dir=tmp_path, agent={"node": "a_b"}))
    done = run_cli(
        "agent", "--node", "a.b", "--nats", "nats://127.0.0.1:1", env={**os.environ, **settings_env(settings)}
    )
    assert done.returncode == 2, done.stderr
    assert "configuration error: agent.node 'a.b' is not a subject token" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_default_node_name_is_the_hostname_as_a_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket, "gethostname", lambda: "gpu01.example.com")
    assert AgentSettings().node == "gpu01_example_com"


def test_the_agent_process_reports_an_unreachable_nats_in_one_line(tmp_path: Path) -> None:
    """``ranksight agent`` execs the agent process: a NATS that does not answer still ends it with exit status 1 and
    one line, as every command reports it (``ranksight.cli``), not a traceback."""
    settings = load_settings(None, state_dir=tmp_path, agent={"node": "a_b"}, nats={"connect_timeout_s": 0.5})
    done = run_cli("agent", "--only", "heartbeat", "--nats", "nats://127.0.0.1:1",
                   env={**os.environ, **settings_env(settings)})  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert (
        done.stderr.startswith("ranksight: cannot connect to NATS at nats://127.0.0.1:1")
        and "Traceback" not in done.stderr
    )
