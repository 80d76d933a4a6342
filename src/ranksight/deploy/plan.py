"""What deploy puts on a node, as pure functions: the layout, the agent config, the unit, the fingerprint, the plan.

Nothing here does I/O on a node; :mod:`deploy.steps` runs it. Secrets live only in the agent config bytes (written 0600)
and are stripped from every message by :func:`ranksight.core.redact.redact`.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

from ranksight.core.redact import redact
from ranksight.deploy.hosts import Host
from ranksight.deploy.settings import DeployView
from ranksight.deploy.wheel import Wheel
from ranksight.schemas.subjects import inbox_prefix

UNIT_NAME = "ranksight-agent.service"
UNIT_TEMPLATE = Path(__file__).resolve().parent / "systemd" / UNIT_NAME
TEMPLATE_DIR = "/opt/ranksight"
TEMPLATE_CONFIG = (
    "/etc/ranksight/agent.toml"  # where the unit as shipped reads its config (the aggregator's beside it)
)
MARKER = ".ranksight-deploy"  # only a folder holding this file is ever removed by --uninstall
SYSTEM_UNIT_DIR = "/etc/systemd/system"
USER_UNIT_DIR = ".config/systemd/user"


@dataclass(frozen=True)
class DeployOptions:
    settings: DeployView
    wheel: Wheel | None  # None only for --dry-run before a wheel exists
    jump: Host | None = None
    accept_new_host_keys: bool = False
    secrets: tuple[str, ...] = field(default=())


@dataclass(frozen=True)
class Layout:
    """Absolute paths of everything deploy writes under one install folder."""

    root: str

    @classmethod
    def under(cls, home: str, remote_dir: str) -> Layout:
        return cls(posixpath.normpath(posixpath.join(home, remote_dir)))

    @property
    def marker(self) -> str:
        return posixpath.join(self.root, MARKER)

    @property
    def manifest(self) -> str:
        return posixpath.join(self.root, "deployed.json")

    @property
    def secrets(self) -> str:
        return posixpath.join(self.root, "secrets")

    @property
    def config(self) -> str:
        return posixpath.join(self.root, "agent.toml")

    @property
    def venv(self) -> str:
        return posixpath.join(self.root, "venv")

    @property
    def state(self) -> str:
        return posixpath.join(self.root, "state")

    @property
    def pidfile(self) -> str:
        return posixpath.join(self.root, "agent.pid")

    @property
    def log(self) -> str:
        return posixpath.join(self.root, "agent.log")

    def wheel(self, wheel: Wheel) -> str:
        return posixpath.join(self.root, "wheels", wheel.name)

    @property
    def wheels(self) -> str:
        return posixpath.join(self.root, "wheels")

    @property
    def agent_bin(self) -> str:
        return posixpath.join(self.venv, "bin", "ranksight")


# NATS settings that name a local file the agent needs: deploy uploads each (0600) and points the config at the copy.
CREDENTIAL_FILES = ("creds_file", "nkey_seed_file", "tls_ca_file", "tls_cert_file", "tls_key_file")


def credential_files(settings: DeployView, layout: Layout) -> dict[str, tuple[Path, str]]:
    """Setting -> (local file, its path on the node) for every credential file the settings name."""
    out = {}
    for key in CREDENTIAL_FILES:
        local = getattr(settings.nats, key)
        if local is not None:
            out[key] = (Path(local), posixpath.join(layout.secrets, f"{key}-{Path(local).name}"))
    return out


def agent_config(settings: DeployView, host: Host, layout: Layout) -> bytes:
    """The node's ``agent.toml``: cluster, NATS URL and credentials, node name, its own state folder."""
    nats: dict[str, Any] = {
        k: v
        for k, v in settings.nats.model_dump(mode="json", exclude_none=True).items()
        if k != "connect_timeout_s"
    }
    for key, (_, remote) in credential_files(settings, layout).items():
        nats[key] = remote
    for key in ("password", "token"):
        secret = getattr(settings.nats, key)
        if secret is not None:
            nats[key] = secret.get_secret_value()
    # the node's own replies, as the shipped NATS config names them (its user is the node), not the deployer's
    nats["inbox_prefix"] = inbox_prefix(host.node)
    doc = {
        "cluster": settings.cluster,
        "subject_prefix": settings.subject_prefix,
        "state_dir": layout.state,
        "log_level": settings.log_level,
        "nats": nats,
        "agent": {"node": host.node},
    }
    return tomli_w.dumps(doc).encode()


def systemd_unit(layout: Layout) -> str:
    """The shipped unit, for deploy's install folder: its program and its config (written there, as a user-level
    install cannot write /etc)."""
    return (
        UNIT_TEMPLATE.read_text().replace(TEMPLATE_CONFIG, layout.config).replace(TEMPLATE_DIR, layout.root)
    )


def user_start_command(layout: Layout) -> str:
    """The user-level fallback: a session-less background agent that outlives the SSH connection."""
    q = shlex.quote
    return (
        f"cd {q(layout.root)} && setsid nohup {q(layout.agent_bin)} agent --config {q(layout.config)}"
        f" >> {q(layout.log)} 2>&1 < /dev/null & echo $! > {q(layout.pidfile)}"
    )


def fingerprint(wheel: Wheel, config: bytes, unit: str, settings: DeployView) -> str:
    """Changes when anything deploy would write or run changes; equal fingerprints mean the host can be skipped."""
    digest = hashlib.sha256()
    deploy = settings.deploy
    parts = [
        wheel.sha256,
        config.decode(),
        unit,
        deploy.python,
        str(deploy.system_site_packages),
        *deploy.pip_options,
        # a rotated credential file must reach the nodes even though the config naming it is unchanged
        *(hashlib.sha256(Path(getattr(settings.nats, k)).read_bytes()).hexdigest()
          for k in CREDENTIAL_FILES if getattr(settings.nats, k) is not None),
    ]  # fmt: skip
    digest.update(json.dumps(parts).encode())
    return digest.hexdigest()


def dry_run_plan(host: Host, options: DeployOptions) -> list[str]:
    """The steps a deploy would take on ``host``, in order, without connecting."""
    deploy = options.settings.deploy
    via = f" via {options.jump}" if options.jump else ""
    wheel = (
        f"{options.wheel.name} (sha256 {options.wheel.sha256[:12]})"
        if options.wheel
        else "built from the source tree"
    )
    venv_flags = " --system-site-packages" if deploy.system_site_packages else ""
    pip = " ".join(deploy.pip_options)
    return [
        f"connect to {host}{via} (known hosts: {'accept new' if options.accept_new_host_keys else 'strict'})",
        f"skip if ~/{deploy.remote_dir}/deployed.json matches this deploy and the agent runs",
        f"upload wheel {wheel} to ~/{deploy.remote_dir}/wheels/ (SFTP)",
        f"create or reuse venv: {deploy.python} -m venv{venv_flags} ~/{deploy.remote_dir}/venv",
        f"pip install {pip + ' ' if pip else ''}the wheel",
        f"write ~/{deploy.remote_dir}/agent.toml (mode 0600): cluster {options.settings.cluster!r}, "
        f"NATS {redact(options.settings.nats.url)}, node {host.node!r}",
        f"start: systemd unit {UNIT_NAME} when systemd runs, else a user-level background agent",
        f"verify: the agent answers {options.settings.subject_prefix}.agent.<cluster>.<node>.status on NATS",
    ]
