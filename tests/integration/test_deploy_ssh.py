"""``ranksight deploy`` against a real OpenSSH server on loopback: deploy, status, re-deploy (skipped), uninstall."""

from __future__ import annotations

import asyncio
import json
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ranksight.deploy import wheel as wheels
from ranksight.deploy.fleet import connect_nats
from ranksight.deploy.plan import DeployOptions
from ranksight.deploy.steps import ask_agent_status
from ranksight.schemas.subjects import Subjects
from ranksight.settings import Settings
from tests.deploy_support import SSHD, Faults, RealSshd, agent_pid_alive, local_shell_server, real_sshd
from tests.support import aggregator, run_cli_async, settings_env

TOKEN = "tok-9f3c1d-secret"

pytestmark = pytest.mark.skipif(
    not SSHD.exists(), reason="openssh-server is not installed (.ci/run installs it)"
)


@pytest.fixture(scope="session")
def project_wheel(tmp_path_factory: pytest.TempPathFactory) -> wheels.Wheel:
    return wheels.build_or_reuse(tmp_path_factory.mktemp("wheels"))


@pytest.fixture
def node(tmp_path: Path) -> Iterator[RealSshd]:
    with real_sshd(tmp_path) as sshd:
        yield sshd


def deploy_env(settings: Settings) -> dict[str, str]:
    env = settings_env(settings)
    env.update(
        RANKSIGHT_NATS__TOKEN=TOKEN,
        RANKSIGHT_DEPLOY__SYSTEM_SITE_PACKAGES="true",
        RANKSIGHT_DEPLOY__PIP_OPTIONS='["--no-index"]',
    )
    return env


def deploy_args(node: RealSshd, wheel: wheels.Wheel, *extra: str) -> list[str]:
    return ["deploy", "--hosts", str(node.hosts_file), "--identity", str(node.identity),
            "--known-hosts", str(node.known_hosts), "--wheel", str(wheel.path), "--json", *extra]  # fmt: skip


async def deploy_cli(
    settings: Settings, node: RealSshd, wheel: wheels.Wheel, *extra: str
) -> tuple[int, dict, str]:
    proc = await run_cli_async(*deploy_args(node, wheel, *extra), env=deploy_env(settings), timeout=120)
    assert TOKEN not in proc.stdout + proc.stderr
    out = json.loads(proc.stdout) if proc.stdout.strip() else {}
    return proc.returncode, out, proc.stderr


async def test_deploy_status_redeploy_uninstall(
    settings: Settings, node: RealSshd, project_wheel: wheels.Wheel
) -> None:
    rc, out, err = await deploy_cli(settings, node, project_wheel)
    assert rc == 0, (out["hosts"][0]["detail"], err[-2000:])
    [row] = out["hosts"]
    assert (row["host"], row["result"], row["version"], row["mode"]) == (
        "127.0.0.1",
        "ok",
        project_wheel.version,
        "background",
    )

    config = node.remote_dir / "agent.toml"
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    assert TOKEN in config.read_text() and 'node = "127_0_0_1"' in config.read_text()  # the host as a token
    assert 'inbox_prefix = "_INBOX.127_0_0_1"' in config.read_text()
    assert stat.S_IMODE((node.remote_dir / "deployed.json").stat().st_mode) == 0o600
    pid = int((node.remote_dir / "agent.pid").read_text())
    assert agent_pid_alive(pid)
    # The SSH session is gone; the agent still answers on NATS, and no process line carries the token.
    nc = await connect_nats(DeployOptions(settings, None))
    try:
        answer = await ask_agent_status(nc, Subjects(settings.subject_prefix), "test", "127.0.0.1", 10)
    finally:
        await nc.close()
    assert answer is not None and answer["version"] == project_wheel.version
    ps = await asyncio.to_thread(subprocess.run, ["ps", "-eo", "args"], capture_output=True, text=True)
    assert TOKEN not in ps.stdout
    assert TOKEN not in (node.remote_dir / "agent.log").read_text()

    rc, out, _ = await deploy_cli(settings, node, project_wheel, "--status")
    assert rc == 0
    assert out["hosts"][0] | {"detail": None} == {"host": "127.0.0.1", "result": "running",
        "version": project_wheel.version, "mode": "background", "detail": None}  # fmt: skip
    assert out["hosts"][0]["detail"] == "answers on NATS"

    started = time.monotonic()
    rc, out, _ = await deploy_cli(settings, node, project_wheel)
    assert rc == 0 and out["hosts"][0]["result"] == "skipped"
    assert time.monotonic() - started < 10
    assert int((node.remote_dir / "agent.pid").read_text()) == pid

    async with aggregator(settings) as agg:  # uninstall drains the node first: its silence raises nothing
        rc, out, _ = await deploy_cli(settings, node, project_wheel, "--uninstall")
        assert agg.engine.drained == {("test", "127.0.0.1")}
    assert rc == 0 and out["hosts"][0]["result"] == "removed"
    assert not agent_pid_alive(pid)
    assert not node.remote_dir.exists()
    rc, out, _ = await deploy_cli(settings, node, project_wheel, "--status")
    assert rc == 0 and out["hosts"][0]["result"] == "not-installed"


async def test_unreachable_host_fails_others_continue(
    settings: Settings, node: RealSshd, project_wheel: wheels.Wheel
) -> None:
    node.hosts_file.write_text(node.hosts_file.read_text() + "localhost:1\n")
    rc, out, _ = await deploy_cli(settings, node, project_wheel, "--status")
    assert rc == 1
    rows = {r["host"]: r for r in out["hosts"]}
    assert rows["127.0.0.1"]["result"] == "not-installed"
    assert rows["localhost"]["result"] == "failed" and "unreachable" in rows["localhost"]["detail"]


async def test_deploy_through_jump_host(
    settings: Settings, node: RealSshd, project_wheel: wheels.Wheel, tmp_path: Path
) -> None:
    async with local_shell_server(tmp_path, Faults(allow_forwarding=True), node.identity) as bastion:
        with node.known_hosts.open("a") as fh:
            fh.write(bastion.host_key_line.replace("127.0.0.1", "localhost") + "\n")
        jump = f"localhost:{bastion.port}"
        rc, out, err = await deploy_cli(settings, node, project_wheel, "--jump", jump)
        assert rc == 0, (out["hosts"][0]["detail"], err[-2000:])
        assert out["hosts"][0]["result"] == "ok"
        rc, out, _ = await deploy_cli(settings, node, project_wheel, "--jump", jump, "--uninstall")
        assert rc == 0 and out["hosts"][0]["result"] == "removed"


async def test_dry_run_prints_plan_without_connecting(settings: Settings, tmp_path: Path) -> None:
    hosts = tmp_path / "hosts"
    hosts.write_text("admin@gpu-node-1:2222  # closed port: a connection would fail\n")
    proc = await run_cli_async("deploy", "--hosts", str(hosts), "--dry-run", env=deploy_env(settings))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("gpu-node-1:\n  1. connect to admin@gpu-node-1:2222")
    assert "mode 0600" in proc.stdout and TOKEN not in proc.stdout
