"""Pure parts of deploy: hosts file parsing, the agent config, redaction, the fingerprint."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from ranksight.agent.runtime import AgentRuntime
from ranksight.core.redact import redact, secrets_of
from ranksight.deploy.hosts import Host, HostsFileError, parse_host, parse_hosts
from ranksight.deploy.plan import Layout, agent_config, credential_files, fingerprint
from ranksight.deploy.wheel import Wheel
from ranksight.settings import load_settings


def test_parse_hosts_forms_comments_and_errors() -> None:
    text = "# fleet\nnode1\nadmin@node2:2222  # bastioned\n\n[fe80::1]:22\nroot@[::1]\n"
    assert parse_hosts(text) == [
        Host("node1"),
        Host("node2", "admin", 2222),
        Host("fe80::1", None, 22),
        Host("::1", "root"),
    ]
    assert str(Host("::1", "root", 2200)) == "root@[::1]:2200"
    with pytest.raises(HostsFileError, match="hosts:2: duplicate host 'node1'"):
        parse_hosts("node1\nx@node1:23\n", "hosts")
    with pytest.raises(HostsFileError, match="hosts:1: not"):
        parse_hosts("a b\n", "hosts")
    with pytest.raises(HostsFileError, match="port out of range"):
        parse_host("node:70000")


def test_agent_config_has_credentials_and_redact_hides_them(tmp_path: Path) -> None:
    settings = load_settings(
        None, cluster="prod-a", nats={"url": "nats://n:4222", "user": "u", "password": "pw-123"}
    )
    layout = Layout.under("/home/ops", ".local/share/ranksight")
    doc = tomllib.loads(agent_config(settings, Host("gpu-1"), layout).decode())
    assert doc["cluster"] == "prod-a" and doc["agent"] == {"node": "gpu-1"}
    assert (
        doc["nats"]["password"] == "pw-123" and doc["state_dir"] == "/home/ops/.local/share/ranksight/state"
    )
    load_settings(None, **doc)  # the node can load it: no unknown keys
    assert redact("auth pw-123 failed", secrets_of(settings)) == "auth *** failed"
    wheel = Wheel(tmp_path / "ranksight-0.1.0-py3-none-any.whl", "ab" * 32)
    config = agent_config(settings, Host("gpu-1"), layout)
    assert fingerprint(wheel, config, "", settings) == fingerprint(wheel, config, "", settings)
    assert fingerprint(wheel, config, "", settings) != fingerprint(
        Wheel(wheel.path, "cd" * 32), config, "", settings
    )
    assert wheel.version == "0.1.0"


def test_a_host_that_is_not_a_token_deploys_as_its_token_and_two_such_hosts_may_not_merge(
    tmp_path: Path,
) -> None:
    settings = load_settings(None, cluster="prod-a", state_dir=tmp_path)
    layout = Layout.under("/home/ops", ".local/share/ranksight")
    doc = tomllib.loads(agent_config(settings, Host("10.0.0.5"), layout).decode())
    assert doc["agent"] == {"node": "10_0_0_5"} and doc["nats"]["inbox_prefix"] == "_INBOX.10_0_0_5"
    AgentRuntime(load_settings(None, **doc))  # the agent runs under it
    with pytest.raises(
        HostsFileError, match=r"hosts:2: host 'gpu_1' and host 'gpu.1' would both be node 'gpu_1'"
    ):
        parse_hosts("gpu.1\nops@gpu_1\n", "hosts")


def test_each_node_gets_the_reply_inbox_the_shipped_nats_config_allows_it() -> None:
    # the deployer's own inbox (its operator user) must not reach the nodes
    settings = load_settings(None, cluster="prod-a", nats={"inbox_prefix": "_INBOX.operator"})
    layout = Layout.under("/home/ops", ".local/share/ranksight")
    doc = tomllib.loads(agent_config(settings, Host("gpu-node-001", user="ops"), layout).decode())
    assert doc["nats"]["inbox_prefix"] == "_INBOX.gpu-node-001"
    shipped = (Path(__file__).resolve().parents[2] / "deploy" / "nats" / "nats-server.conf").read_text()
    agent_block = shipped.split("AGENT_GPU_NODE_001 = {", 1)[1].split("AGGREGATOR = {", 1)[0]
    assert f'"{doc["nats"]["inbox_prefix"]}.>"' in agent_block.split("subscribe:", 1)[1]
    assert load_settings(None, **doc).nats.inbox_prefix == "_INBOX.gpu-node-001"


def test_credential_files_are_uploaded_copies_and_part_of_the_fingerprint(tmp_path: Path) -> None:
    creds = tmp_path / "agent.creds"
    creds.write_text("-----BEGIN NATS USER JWT-----\nabc\n")
    settings = load_settings(None, nats={"url": "nats://n:4222", "creds_file": str(creds)})
    layout = Layout.under("/home/ops", ".local/share/ranksight")
    [(key, (local, remote))] = credential_files(settings, layout).items()
    assert (key, local) == ("creds_file", creds)
    assert remote == "/home/ops/.local/share/ranksight/secrets/creds_file-agent.creds"
    config = agent_config(settings, Host("gpu-1"), layout)
    assert tomllib.loads(config.decode())["nats"]["creds_file"] == remote  # the node reads its own copy
    wheel = Wheel(tmp_path / "ranksight-0.1.0-py3-none-any.whl", "ab" * 32)
    before = fingerprint(wheel, config, "", settings)
    creds.write_text("-----BEGIN NATS USER JWT-----\nrotated\n")
    assert fingerprint(wheel, config, "", settings) != before  # a rotated credential is redeployed
