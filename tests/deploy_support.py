"""Deploy test helpers: a real OpenSSH ``sshd`` on loopback with a throwaway user, and in-process asyncssh servers.

The real server is Debian's ``openssh-server`` run as ``sshd -f CONFIG -D -e`` with a throwaway host key and user key.
As root it logs into a throwaway user whose home is a fresh temporary folder (removed afterwards); otherwise into the
current user. The "node" is this machine, so the node's venv gets the project's dependencies without a network:
``PYTHONUSERBASE`` (set by sshd's ``SetEnv``) points at a user site whose ``.pth`` names this venv's site-packages, and
deploy runs with ``system_site_packages`` and ``pip_options=["--no-index"]``. The wheel itself is really built,
uploaded and installed.

:class:`LocalShellServer` is an asyncssh server that runs each command in a local shell and serves SFTP on the local
file system, the same two services deploy uses on OpenSSH; its hooks inject the faults real fleets show (a dropped
connection mid-upload, ENOSPC, a failing command).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import shutil
import signal
import site
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import asyncssh

SSHD = Path("/usr/sbin/sshd")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def keygen(path: Path) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return path


@dataclass
class RealSshd:
    port: int
    user: str
    home: Path
    identity: Path
    known_hosts: Path
    hosts_file: Path
    userbase: Path

    @property
    def remote_dir(self) -> Path:
        return self.home / ".local/share/ranksight"


def _throwaway_user(home: Path) -> str:
    name = f"rsd{uuid.uuid4().hex[:8]}"
    subprocess.run(["useradd", "-M", "-d", str(home), "-s", "/bin/sh", name], check=True, capture_output=True)
    subprocess.run(["usermod", "-p", "*", name], check=True, capture_output=True)  # not locked, no password
    return name


@contextlib.contextmanager
def real_sshd(workdir: Path) -> Iterator[RealSshd]:
    """sshd on 127.0.0.1:<free port>; yields what a client needs (key, known_hosts, a hosts file naming it)."""
    root = os.geteuid() == 0
    home = Path(tempfile.mkdtemp(prefix="rs-home-"))
    home.chmod(0o755)
    user = _throwaway_user(home) if root else pwd.getpwuid(os.geteuid()).pw_name
    keys = Path(tempfile.mkdtemp(prefix="rs-sshd-"))
    host_key = keygen(keys / "host_key")
    identity = keygen(workdir / "id_ed25519")
    authorized = keys / "authorized_keys"
    authorized.write_text(Path(f"{identity}.pub").read_text())
    userbase = keys / "userbase"
    user_site = userbase / "lib" / "python3.11" / "site-packages"
    user_site.mkdir(parents=True)
    (user_site / "ranksight-test-deps.pth").write_text(site.getsitepackages()[0] + "\n")
    for path in (keys, userbase, userbase / "lib", userbase / "lib" / "python3.11", user_site):
        path.chmod(0o755)
    authorized.chmod(0o644)
    if root:
        shutil.chown(home, user)
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation folder
    port = free_port()
    config = keys / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {host_key}\nPidFile {keys}/sshd.pid\n"
        f"AuthorizedKeysFile {authorized}\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
        f"PermitRootLogin prohibit-password\nUsePAM no\nStrictModes no\nAllowUsers {user}\n"
        f"SetEnv PYTHONUSERBASE={userbase}\nSubsystem sftp internal-sftp\nLogLevel ERROR\n"
    )
    proc = subprocess.Popen([str(SSHD), "-f", str(config), "-D", "-e"], stderr=subprocess.PIPE)
    known_hosts = workdir / "known_hosts"
    known_hosts.write_text(f"[127.0.0.1]:{port} {Path(f'{host_key}.pub').read_text()}")
    hosts_file = workdir / "hosts"
    hosts_file.write_text(f"# the test node\n{user}@127.0.0.1:{port}\n")
    try:
        _wait_port(port, proc)
        yield RealSshd(port, user, home, identity, known_hosts, hosts_file, userbase)
    finally:
        _kill_agent(home / ".local/share/ranksight/agent.pid")
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)
        if root:
            subprocess.run(["userdel", user], capture_output=True)
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(keys, ignore_errors=True)


def _wait_port(port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"sshd exited: {proc.stderr.read().decode() if proc.stderr else ''}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise RuntimeError("sshd did not listen")


def _kill_agent(pidfile: Path) -> None:
    """Stop an agent a failed test left behind (only the pid deploy recorded)."""
    with contextlib.suppress(OSError, ValueError):
        os.kill(int(pidfile.read_text().strip()), signal.SIGKILL)


def agent_pid_alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie waiting for its parent counts as gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] != "Z"


# -- in-process asyncssh servers -----------------------------------------------------------------------------------


@dataclass
class Faults:
    drop_upload_after: int | None = None  # bytes written before the connection is cut
    disk_full: bool = False
    fail_command: str | None = None  # a command containing this text exits 1
    allow_forwarding: bool = False


class _Server(asyncssh.SSHServer):
    def __init__(self, faults: Faults) -> None:
        self.faults = faults

    def connection_requested(self, dest_host: str, dest_port: int, orig_host: str, orig_port: int) -> bool:
        return self.faults.allow_forwarding


def _sftp_factory(faults: Faults) -> Callable[[asyncssh.SSHServerChannel], asyncssh.SFTPServer]:
    class FaultySftp(asyncssh.SFTPServer):
        written = 0

        def write(self, file_obj: object, offset: int, data: bytes) -> int:
            if faults.disk_full:
                raise asyncssh.SFTPFailure("No space left on device")
            FaultySftp.written += len(data)
            if faults.drop_upload_after is not None and FaultySftp.written > faults.drop_upload_after:
                self.connection.abort()
                raise asyncssh.SFTPConnectionLost("connection dropped")
            return super().write(file_obj, offset, data)  # type: ignore[arg-type,return-value]

    return FaultySftp


def _process_factory(faults: Faults) -> Callable[[asyncssh.SSHServerProcess[str]], object]:
    async def handle(process: asyncssh.SSHServerProcess[str]) -> None:
        command = process.command or ""
        if faults.fail_command and faults.fail_command in command:
            process.stderr.write("ERROR: Could not install packages due to an OSError: injected failure\n")
            process.exit(1)
            return
        # stdin is not relayed: deploy's background mode sends none (a systemd unit is the only stdin it writes).
        local = await asyncio.create_subprocess_shell(
            command,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        stdout, stderr = await local.communicate()
        process.stdout.write(stdout.decode(errors="replace"))
        process.stderr.write(stderr.decode(errors="replace"))
        process.exit(local.returncode or 0)

    return handle


@dataclass
class InProcessServer:
    port: int
    host_key_line: str


@contextlib.asynccontextmanager
async def local_shell_server(
    workdir: Path, faults: Faults, authorized_key: Path | None
) -> AsyncIterator[InProcessServer]:
    """An asyncssh server on loopback that trusts ``authorized_key`` (None: nobody, so every login fails)."""
    host_key = asyncssh.generate_private_key("ssh-ed25519")
    authorized = (
        asyncssh.read_authorized_keys(f"{authorized_key}.pub")
        if authorized_key
        else asyncssh.import_authorized_keys("")
    )
    server = await asyncssh.listen(
        "127.0.0.1",
        0,
        server_factory=lambda: _Server(faults),
        server_host_keys=[host_key],
        authorized_client_keys=authorized,
        process_factory=_process_factory(faults),
        sftp_factory=_sftp_factory(faults),
        allow_scp=False,
    )
    port = server.sockets[0].getsockname()[1]
    try:
        yield InProcessServer(port, f"[127.0.0.1]:{port} {host_key.export_public_key().decode().strip()}")
    finally:
        server.close()
        await server.wait_closed()
