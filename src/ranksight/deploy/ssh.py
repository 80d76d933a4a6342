"""SSH connections for deploy (asyncssh): jump host, key or agent auth, known-hosts checking, one clear failure reason.

Exceptions (all :class:`HostFailed`, whose message is safe to print: no secrets)::

    HostFailed            a host could not be deployed / checked; ``str()`` is the reason shown in the result table
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import posixpath
import shlex
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncssh

from ranksight.deploy.hosts import Host
from ranksight.deploy.settings import DeploySettings
from ranksight.errors import RanksightError


class HostFailed(RanksightError):
    """One host's step failed; the message names the step and the reason."""


@dataclass(frozen=True)
class SshOptions:
    deploy: DeploySettings
    accept_new_host_keys: bool = False

    @property
    def known_hosts_file(self) -> Path:
        return self.deploy.known_hosts or Path.home() / ".ssh" / "known_hosts"


def _host_pattern(host: Host) -> str:
    return f"[{host.host}]:{host.port}" if host.port and host.port != 22 else host.host


def _known_hosts_arg(host: Host, opts: SshOptions) -> Any:
    """Strict checking against the known_hosts file; with ``accept_new_host_keys``, an unknown host is let through
    (and recorded after the handshake) while a known host with a different key still fails."""
    path = opts.known_hosts_file
    known = asyncssh.read_known_hosts(str(path)) if path.is_file() else asyncssh.import_known_hosts("")
    if opts.accept_new_host_keys and not known.match(host.host, "", host.port or 22)[0]:
        return None
    return known


def _record_host_key(conn: asyncssh.SSHClientConnection, host: Host, opts: SshOptions) -> None:
    key = conn.get_server_host_key()
    if key is None:
        return
    path = opts.known_hosts_file
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with path.open("a") as fh:
        fh.write(f"{_host_pattern(host)} {key.export_public_key().decode().strip()}\n")


def explain(exc: BaseException, host: Host) -> str:
    """A one-line reason for a connection failure, in the operator's terms."""
    if isinstance(exc, asyncssh.HostKeyNotVerifiable):
        return f"host key of {host.host} not trusted (not in known_hosts, or changed): {exc.reason}"
    if isinstance(exc, asyncssh.PermissionDenied):
        return f"authentication failed for {host}: {exc.reason}"
    if isinstance(exc, asyncssh.ConnectionLost | asyncssh.DisconnectError):
        return f"connection lost: {exc.reason}"
    if isinstance(exc, TimeoutError | asyncio.TimeoutError):
        return f"unreachable: {host} did not answer in time"
    if isinstance(exc, OSError):
        return f"unreachable: {exc.strerror or exc}"
    return f"{type(exc).__name__}: {exc}"


async def _open(host: Host, opts: SshOptions, tunnel: Any = None) -> asyncssh.SSHClientConnection:
    known_hosts = _known_hosts_arg(host, opts)
    kwargs: dict[str, Any] = {
        "port": host.port or 22,
        "username": host.user or getpass.getuser(),
        "known_hosts": known_hosts,
        "connect_timeout": opts.deploy.connect_timeout_s,
        "tunnel": tunnel,
        "keepalive_interval": 15,
    }
    if opts.deploy.identity_file:
        kwargs["client_keys"] = [str(opts.deploy.identity_file)]
    try:
        conn = await asyncssh.connect(host.host, **kwargs)
    except (OSError, asyncssh.Error, TimeoutError) as exc:
        raise HostFailed(explain(exc, host)) from None
    if known_hosts is None:
        _record_host_key(conn, host, opts)
    return conn


@contextlib.asynccontextmanager
async def jump_connection(
    jump: Host | None, opts: SshOptions
) -> AsyncIterator[asyncssh.SSHClientConnection | None]:
    """One connection to the bastion, shared by every host's tunnel."""
    if jump is None:
        yield None
        return
    try:
        conn = await _open(jump, opts)
    except HostFailed as exc:
        raise HostFailed(f"jump host {jump}: {exc}") from None
    try:
        yield conn
    finally:
        conn.close()


class Node:
    """An open SSH session to one host: run commands (with timeouts), and SFTP."""

    def __init__(self, host: Host, conn: asyncssh.SSHClientConnection, opts: SshOptions) -> None:
        self.host = host
        self.conn = conn
        self.opts = opts

    @classmethod
    @contextlib.asynccontextmanager
    async def open(cls, host: Host, opts: SshOptions, tunnel: Any = None) -> AsyncIterator[Node]:
        conn = await _open(host, opts, tunnel)
        try:
            yield cls(host, conn, opts)
        finally:
            conn.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.wait_closed(), 5)

    async def run(
        self,
        command: str,
        step: str,
        check: bool = True,
        timeout: float | None = None,
        stdin: str | None = None,
    ) -> str:
        """Run ``command`` under ``sh -c``; on failure raise :class:`HostFailed` naming ``step`` and stderr's last line."""
        try:
            result = await self.conn.run(
                f"sh -c {shlex.quote(command)}",
                check=False,
                input=stdin,
                timeout=timeout or self.opts.deploy.command_timeout_s,
            )
        except asyncssh.TimeoutError:
            raise HostFailed(f"{step}: timed out") from None
        except (OSError, asyncssh.Error) as exc:
            raise HostFailed(f"{step}: {explain(exc, self.host)}") from None
        stdout = _text(result.stdout)
        if check and result.exit_status != 0:
            lines = [ln for ln in (_text(result.stderr) + "\n" + stdout).splitlines() if ln.strip()]
            last = lines[-1].strip() if lines else "no output"
            status = result.exit_status if result.exit_status is not None else f"signal {result.exit_signal}"
            raise HostFailed(f"{step} failed (exit {status}): {last}")
        return stdout

    async def home(self) -> str:
        return (await self.run('printf %s "$HOME"', "read home folder")).strip()

    async def put(self, local: Path, remote: str, step: str) -> None:
        """Upload to ``remote.part``, then rename: a dropped connection never leaves a file that looks complete."""
        part = remote + ".part"
        try:
            async with self.conn.start_sftp_client() as sftp:
                await sftp.makedirs(posixpath.dirname(remote), exist_ok=True)
                await sftp.put(str(local), part)
                await sftp.posix_rename(part, remote)
        except asyncssh.SFTPError as exc:
            raise HostFailed(f"{step}: {exc.reason}") from None
        except (OSError, asyncssh.Error) as exc:
            raise HostFailed(f"{step}: {explain(exc, self.host)}") from None

    async def write_private(self, data: bytes, remote: str, step: str) -> None:
        """Write ``remote`` created with mode 0600 (never world-readable, not even for a moment)."""
        part = remote + ".part"
        try:
            async with self.conn.start_sftp_client() as sftp:
                with contextlib.suppress(asyncssh.SFTPError):
                    await sftp.remove(part)
                attrs = asyncssh.SFTPAttrs(permissions=0o600)
                async with sftp.open(part, "wb", attrs) as fh:
                    await fh.write(data)
                await sftp.chmod(part, 0o600)
                await sftp.posix_rename(part, remote)
        except asyncssh.SFTPError as exc:
            raise HostFailed(f"{step}: {exc.reason}") from None
        except (OSError, asyncssh.Error) as exc:
            raise HostFailed(f"{step}: {explain(exc, self.host)}") from None


def _text(value: str | bytes | None) -> str:
    if value is None:
        return ""
    return value.decode(errors="replace") if isinstance(value, bytes) else value
