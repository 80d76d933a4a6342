"""What deploy does on one host: :func:`deploy_host`, :func:`status_host`, :func:`uninstall_host`.

Order matters for failure handling: upload, install and config come first; the agent is started last, and stopped
again when it does not answer on NATS, so a failed host never keeps a half-installed agent running.
"""

from __future__ import annotations

import asyncio
import json
import posixpath
import shlex
import time
from dataclasses import dataclass
from typing import Any, Literal

from nats.aio.client import Client

from ranksight.deploy.plan import (
    SYSTEM_UNIT_DIR,
    UNIT_NAME,
    USER_UNIT_DIR,
    DeployOptions,
    Layout,
    agent_config,
    credential_files,
    fingerprint,
    systemd_unit,
    user_start_command,
)
from ranksight.deploy.ssh import HostFailed, Node
from ranksight.schemas.subjects import Subjects

Mode = Literal["systemd", "systemd-user", "background"]
q = shlex.quote

_DETECT_MODE = (
    'if [ -d /run/systemd/system ]; then if [ "$(id -u)" = 0 ]; then echo systemd; '
    "elif systemctl --user show-environment >/dev/null 2>&1 && loginctl enable-linger >/dev/null 2>&1; "
    "then echo systemd-user; else echo background; fi; else echo background; fi"
)


@dataclass
class HostResult:
    host: str
    result: str  # ok | skipped | failed | running | stopped | not-installed | removed
    version: str | None = None
    mode: str | None = None
    detail: str = ""

    @property
    def failed(self) -> bool:
        return self.result == "failed"

    def row(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "result": self.result,
            "version": self.version,
            "mode": self.mode,
            "detail": self.detail,
        }


def _systemctl(mode: Mode) -> str:
    return "systemctl --user" if mode == "systemd-user" else "systemctl"


def _is_running_command(mode: Mode, layout: Layout) -> str:
    if mode != "background":
        return f"{_systemctl(mode)} is-active --quiet {UNIT_NAME}"
    # The pid must still be our agent (its command line names our config), not a recycled pid.
    return (
        f'pid=$(cat {q(layout.pidfile)} 2>/dev/null) && [ -n "$pid" ] && '
        f"tr '\\0' ' ' < /proc/$pid/cmdline 2>/dev/null | grep -qF -- {q(layout.config)}"
    )


async def _running(node: Node, mode: Mode, layout: Layout) -> bool:
    return bool(
        (await node.run(f"{_is_running_command(mode, layout)} && echo yes || true", "check agent")).strip()
    )


async def _stop(node: Node, mode: Mode, layout: Layout) -> None:
    if mode != "background":
        await node.run(f"{_systemctl(mode)} disable --now {UNIT_NAME} >/dev/null 2>&1 || true", "stop agent")
        return
    running = _is_running_command(mode, layout)
    await node.run(
        f'if {running}; then kill "$pid"; for i in $(seq 50); do {running} || break; sleep 0.2; done; '
        f'{running} && kill -9 "$pid"; fi; rm -f {q(layout.pidfile)}',
        "stop agent",
    )


async def _start(node: Node, mode: Mode, layout: Layout, unit: str) -> None:
    if mode == "background":
        await node.run(user_start_command(layout), "start agent")
        return
    unit_dir = SYSTEM_UNIT_DIR if mode == "systemd" else posixpath.join(await node.home(), USER_UNIT_DIR)
    # The unit has no secrets; stdin keeps it out of the command line and out of quoting.
    unit_path = posixpath.join(unit_dir, UNIT_NAME)
    await node.run(f"mkdir -p {q(unit_dir)} && cat > {q(unit_path)}", "write unit", stdin=unit)
    sc = _systemctl(mode)
    await node.run(
        f"{sc} daemon-reload && {sc} enable {UNIT_NAME} >/dev/null 2>&1 && {sc} restart {UNIT_NAME}",
        "start agent",
    )


async def _read_manifest(node: Node, layout: Layout) -> dict[str, Any] | None:
    raw = await node.run(f"cat {q(layout.manifest)} 2>/dev/null || true", "read manifest")
    try:
        manifest = json.loads(raw) if raw.strip() else None
    except ValueError:
        return None
    return manifest if isinstance(manifest, dict) else None


async def ask_agent_status(
    nc: Client, subjects: Subjects, cluster: str, node: str, timeout: float
) -> dict[str, Any] | None:
    """The agent's answer to its NATS ``status`` command, or None when it does not answer within ``timeout``."""
    deadline = time.monotonic() + timeout
    subject = subjects.agent(cluster, node, "status")
    while True:
        try:
            msg = await nc.request(subject, b"{}", timeout=min(1.0, max(0.1, deadline - time.monotonic())))
            answer = json.loads(msg.data)
            if isinstance(answer, dict) and "version" in answer:
                return answer
        except Exception:  # no responders, timeout, error reply: not (yet) answering
            pass
        if time.monotonic() >= deadline:
            return None
        await asyncio.sleep(0.2)


async def deploy_host(node: Node, opts: DeployOptions, nc: Client) -> HostResult:
    settings, wheel = opts.settings, opts.wheel
    assert wheel is not None
    cfg = settings.deploy
    layout = Layout.under(await node.home(), cfg.remote_dir)
    mode: Mode = (await node.run(_DETECT_MODE, "detect service manager")).strip()  # type: ignore[assignment]
    config = agent_config(settings, node.host, layout)
    unit = systemd_unit(layout) if mode != "background" else ""
    fp = fingerprint(wheel, config, unit, settings)
    manifest = await _read_manifest(node, layout)
    if (
        manifest
        and manifest.get("fingerprint") == fp
        and manifest.get("mode") == mode
        and await _running(node, mode, layout)
    ):
        return HostResult(node.host.name, "skipped", manifest.get("version"), mode, "unchanged and running")

    await node.run(
        f"umask 077 && mkdir -p {q(layout.wheels)} {q(layout.state)} && touch {q(layout.marker)}",
        "create install folder",
    )
    remote_wheel = layout.wheel(wheel)
    have = await node.run(f"sha256sum {q(remote_wheel)} 2>/dev/null || true", "check wheel")
    if have.split()[:1] != [wheel.sha256]:
        await node.put(wheel.path, remote_wheel, "upload wheel")
    venv_flags = " --system-site-packages" if cfg.system_site_packages else ""
    await node.run(
        f"test -x {q(layout.venv)}/bin/python || {cfg.python} -m venv{venv_flags} {q(layout.venv)}",
        "create venv",
    )
    pip = f"{q(layout.venv)}/bin/python -m pip install -q --disable-pip-version-check {' '.join(map(q, cfg.pip_options))}"
    # First the dependencies, then exactly this wheel even when its version number did not change.
    await node.run(
        f"{pip} {q(remote_wheel)} && {pip} --force-reinstall --no-deps {q(remote_wheel)}", "install"
    )
    if credentials := credential_files(settings, layout):
        await node.run(f"umask 077 && mkdir -p {q(layout.secrets)}", "create secrets folder")
        for key, (local, remote) in credentials.items():
            await node.write_private(local.read_bytes(), remote, f"upload {key}")
    await node.write_private(config, layout.config, "write agent config")

    if manifest and manifest.get("mode") in ("systemd", "systemd-user", "background"):
        await _stop(node, manifest["mode"], layout)
    await _stop(node, mode, layout)
    await _start(node, mode, layout, unit)
    answer = await ask_agent_status(
        nc, Subjects(settings.subject_prefix), settings.cluster, node.host.node, cfg.verify_timeout_s
    )
    if answer is None:
        log_tail = await node.run(f"tail -n 3 {q(layout.log)} 2>/dev/null || true", "read agent log")
        await _stop(node, mode, layout)
        hint = f"; agent log: {' | '.join(log_tail.strip().splitlines())}" if log_tail.strip() else ""
        raise HostFailed(
            f"verify: the agent did not answer on NATS within {cfg.verify_timeout_s:g}s (stopped it){hint}"
        )
    record = {"version": answer["version"], "wheel": wheel.name, "wheel_sha256": wheel.sha256, "fingerprint": fp,
              "mode": mode, "deployed_at": time.time()}  # fmt: skip
    await node.write_private(json.dumps(record).encode(), layout.manifest, "write manifest")
    return HostResult(
        node.host.name, "ok", answer["version"], mode, f"agent {answer.get('incarnation')} answers"
    )


async def status_host(node: Node, opts: DeployOptions, nc: Client | None) -> HostResult:
    settings = opts.settings
    layout = Layout.under(await node.home(), settings.deploy.remote_dir)
    manifest = await _read_manifest(node, layout)
    if manifest is None:
        return HostResult(node.host.name, "not-installed")
    mode = manifest.get("mode", "background")
    running = await _running(node, mode, layout)
    detail = ""
    if running and nc is not None:
        answer = await ask_agent_status(
            nc, Subjects(settings.subject_prefix), settings.cluster, node.host.node, 2.0
        )
        detail = "answers on NATS" if answer else "does not answer on NATS"
    return HostResult(
        node.host.name, "running" if running else "stopped", manifest.get("version"), mode, detail
    )


async def uninstall_host(node: Node, opts: DeployOptions) -> HostResult:
    home = await node.home()
    layout = Layout.under(home, opts.settings.deploy.remote_dir)
    if not (await node.run(f"test -f {q(layout.marker)} && echo yes || true", "check install")).strip():
        return HostResult(node.host.name, "not-installed")
    manifest = await _read_manifest(node, layout) or {}
    mode = manifest.get("mode", "background")
    await _stop(node, mode, layout)
    if mode != "background":
        unit_dir = SYSTEM_UNIT_DIR if mode == "systemd" else posixpath.join(home, USER_UNIT_DIR)
        await node.run(
            f"rm -f {q(posixpath.join(unit_dir, UNIT_NAME))} && {_systemctl(mode)} daemon-reload",
            "remove unit",
        )
    # Only a folder that deploy marked as its own is removed.
    await node.run(f"test -f {q(layout.marker)} && rm -rf {q(layout.root)}", "remove install folder")
    return HostResult(node.host.name, "removed", manifest.get("version"), mode)
