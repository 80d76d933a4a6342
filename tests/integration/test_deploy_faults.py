"""Fault cases against in-process asyncssh servers: auth failure, a connection dropped mid-upload, a full disk, a
failing install, an unknown host key. Each host reports its own reason; nothing is left running."""

from __future__ import annotations

from pathlib import Path

import pytest

from ranksight.deploy import wheel as wheels
from ranksight.deploy.fleet import connect_nats, run_fleet
from ranksight.deploy.hosts import Host
from ranksight.deploy.plan import DeployOptions
from ranksight.deploy.ssh import Node
from ranksight.deploy.steps import HostResult, deploy_host, status_host
from ranksight.settings import Settings
from tests.deploy_support import Faults, keygen, local_shell_server

TOKEN = "tok-faults-5e7a"


@pytest.fixture(scope="module")
def small_wheel(tmp_path_factory: pytest.TempPathFactory) -> wheels.Wheel:
    """A wheel-shaped file large enough to be mid-upload when the connection drops (pip is never reached)."""
    path = tmp_path_factory.mktemp("w") / "ranksight-0.1.0-py3-none-any.whl"
    path.write_bytes(b"PK" + bytes(range(256)) * 4096)
    return wheels.from_file(path)


def options(settings: Settings, tmp_path: Path, wheel: wheels.Wheel, known_hosts: Path, identity: Path,
            accept_new: bool = False) -> DeployOptions:  # fmt: skip
    data = settings.model_dump()
    data["nats"]["token"] = TOKEN
    data["deploy"].update(
        remote_dir=str(tmp_path / "node"), known_hosts=known_hosts, identity_file=identity, verify_timeout_s=2
    )
    return DeployOptions(Settings(**data), wheel, None, accept_new, (TOKEN,))


async def deploy_all(opts: DeployOptions, hosts: list[Host]) -> dict[str, HostResult]:
    nc = await connect_nats(opts)
    try:

        async def action(node: Node) -> HostResult:
            return await deploy_host(node, opts, nc)

        return {r.host: r for r in await run_fleet(hosts, opts, action)}
    finally:
        await nc.close()


@pytest.fixture
def identity(tmp_path: Path) -> Path:
    return keygen(tmp_path / "id_ed25519")


async def test_auth_failure_and_dropped_upload_and_full_disk(
    settings: Settings, tmp_path: Path, identity: Path, small_wheel: wheels.Wheel
) -> None:
    known = tmp_path / "known_hosts"
    async with (
        local_shell_server(tmp_path, Faults(), None) as no_auth,
        local_shell_server(tmp_path, Faults(drop_upload_after=64 * 1024), identity) as dropping,
        local_shell_server(tmp_path, Faults(disk_full=True), identity) as full,
    ):
        lines = [no_auth.host_key_line.replace("127.0.0.1", "localhost"), dropping.host_key_line,
                 full.host_key_line.replace("127.0.0.1", "localhost")]  # fmt: skip
        known.write_text("\n".join(lines) + "\n")
        hosts = [Host("localhost", port=no_auth.port), Host("127.0.0.1", port=dropping.port)]
        opts = options(settings, tmp_path, small_wheel, known, identity)
        results = await deploy_all(opts, hosts)
        assert results["localhost"].failed and "authentication failed" in results["localhost"].detail
        assert results["127.0.0.1"].failed
        assert results["127.0.0.1"].detail.startswith("upload wheel: connection lost")
        # The partial upload never looks complete, and nothing was started.
        assert not (tmp_path / "node/wheels" / small_wheel.name).exists()
        assert not (tmp_path / "node/agent.pid").exists()

        results = await deploy_all(opts, [Host("localhost", port=full.port)])
        assert results["localhost"].failed
        assert results["localhost"].detail == "upload wheel: No space left on device"


async def test_failing_install_reports_reason_and_starts_nothing(
    settings: Settings, tmp_path: Path, identity: Path, small_wheel: wheels.Wheel
) -> None:
    known = tmp_path / "known_hosts"
    async with local_shell_server(tmp_path, Faults(fail_command="pip install"), identity) as server:
        known.write_text(server.host_key_line.replace("127.0.0.1", "localhost") + "\n")
        opts = options(settings, tmp_path, small_wheel, known, identity)
        (tmp_path / "node/venv/bin").mkdir(parents=True)  # an existing venv is reused: pip is what fails
        (tmp_path / "node/venv/bin/python").symlink_to("/bin/true")
        results = await deploy_all(opts, [Host("localhost", port=server.port)])
    result = results["localhost"]
    assert result.failed
    assert (
        result.detail
        == "install failed (exit 1): ERROR: Could not install packages due to an OSError: injected failure"
    )
    assert (tmp_path / "node/wheels" / small_wheel.name).read_bytes() == small_wheel.path.read_bytes()
    assert not (tmp_path / "node/agent.toml").exists()
    assert not (tmp_path / "node/agent.pid").exists()


async def test_unknown_host_key_is_refused_unless_accepted(
    settings: Settings, tmp_path: Path, identity: Path, small_wheel: wheels.Wheel
) -> None:
    known = tmp_path / "known_hosts"
    async with local_shell_server(tmp_path, Faults(), identity) as server:
        host = Host("localhost", port=server.port)
        strict = options(settings, tmp_path, small_wheel, known, identity)
        [refused] = await run_fleet([host], strict, lambda node: status_host(node, strict, None))
        assert refused.failed and "host key of localhost not trusted" in refused.detail
        accepting = options(settings, tmp_path, small_wheel, known, identity, accept_new=True)
        [ok] = await run_fleet([host], accepting, lambda node: status_host(node, accepting, None))
        assert ok.result == "not-installed", ok.detail
        assert known.read_text().strip() == server.host_key_line.replace("127.0.0.1", "localhost")
        [again] = await run_fleet([host], strict, lambda node: status_host(node, strict, None))
        assert again.result == "not-installed"
