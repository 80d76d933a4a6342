"""A real one-node Slurm cluster for tests: Debian's munged, slurmctld and slurmd (slurm-wlm 22.05), started in a
temporary directory with their own munge key, socket, ports, state and logs, so nothing of the machine's own Slurm (if
any) is touched. ``scontrol`` finds it through ``SLURM_CONF``. Skips with the reason where the binaries are missing or
the daemons do not start (``.ci/run`` installs slurm-wlm and munge)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

BINARIES = ("munged", "slurmctld", "slurmd", "scontrol")
START_S = 30.0


@dataclass(frozen=True)
class SlurmCluster:
    conf: Path
    node: str  # the one node: this machine's short host name, as slurmd registers it

    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def scontrol(self, *args: str) -> str:
        return subprocess.run(["scontrol", *args], env=self.env(), capture_output=True, text=True, check=True,
                              timeout=30).stdout  # fmt: skip


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _conf(d: Path, node: str) -> str:
    return f"""ClusterName=ranksight-test
SlurmctldHost={node}
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={d}/munge.sock
CredType=cred/munge
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd.log
PlugStackConfig={d}/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
NodeName={node} CPUs={os.cpu_count() or 1} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


def _stop(pidfile: Path) -> None:
    try:
        pid = int(pidfile.read_text())
    except (OSError, ValueError):
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)


def start_slurm(d: Path) -> Iterator[SlurmCluster]:
    missing = [b for b in BINARIES if shutil.which(b) is None and not Path("/usr/sbin", b).exists()]
    if missing:
        pytest.skip(f"Slurm not installed (apt-get install slurm-wlm munge): no {', '.join(missing)}")
    if os.geteuid() != 0:
        pytest.skip("the one-node Slurm cluster runs slurmd as root (it must manage the node)")
    d.mkdir(parents=True, exist_ok=True)
    d.chmod(0o755)  # munged's socket needs its directory searchable
    for sub in ("state", "spool"):
        (d / sub).mkdir()
    key = d / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    (d / "plugstack.conf").write_text("")
    node = socket.gethostname().split(".")[0]
    cluster = SlurmCluster(d / "slurm.conf", node)
    cluster.conf.write_text(_conf(d, node))
    env = cluster.env()
    sbin = lambda name: shutil.which(name) or f"/usr/sbin/{name}"  # noqa: E731
    try:
        subprocess.run([sbin("munged"), f"--key-file={key}", f"--socket={d}/munge.sock", f"--pid-file={d}/munged.pid",
                        f"--log-file={d}/munged.log", f"--seed-file={d}/munge.seed", "--force"],
                       check=True, timeout=30, capture_output=True)  # fmt: skip
        subprocess.run([sbin("slurmctld"), "-i"], env=env, check=True, timeout=30, capture_output=True)
        subprocess.run([sbin("slurmd")], env=env, check=True, timeout=30, capture_output=True)
        deadline = time.monotonic() + START_S
        while True:
            try:
                shown = cluster.scontrol("show", "node", node)
                if "State=IDLE" in shown or "State=MIXED" in shown:
                    break
            except subprocess.CalledProcessError:
                pass
            if time.monotonic() > deadline:
                logs = "".join(p.read_text()[-1500:] for p in d.glob("*.log"))
                pytest.skip(f"the one-node Slurm cluster did not come up within {START_S:g} s: {logs}")
            time.sleep(0.3)
        yield cluster
    except subprocess.CalledProcessError as exc:
        pytest.skip(f"a Slurm daemon did not start: {exc.cmd[0]}: {exc.stderr!r}")
    finally:
        for pidfile in ("slurmd.pid", "slurmctld.pid", "munged.pid"):
            _stop(d / pidfile)
