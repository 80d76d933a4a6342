"""Busy-node detection on real and captured inputs: GPU device users, amdgpu utilization, RAS port, Inspector dir."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

from ranksight.agent.gpuprobe.busy import (
    amdgpu_utilization,
    busy_reasons,
    gpu_device_users,
    listening_ports,
)
from ranksight.agent.gpuprobe.settings import GpuProbeSettings
from tests.conftest import FIXTURES
from tests.gpuprobe_support import idle_roots

SYSFS = FIXTURES / "gpu_probe" / "sys"


def _process(proc: Path, pid: int, comm: str, *targets: str) -> None:
    fd_dir = proc / str(pid) / "fd"
    fd_dir.mkdir(parents=True)
    (proc / str(pid) / "comm").write_text(comm + "\n")
    for n, target in enumerate(targets):
        os.symlink(target, fd_dir / str(n))


def test_gpu_device_users_finds_compute_device_holders(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    _process(proc, 100, "python", "/dev/null", "/dev/kfd", "/dev/dri/renderD128")  # ROCm job
    _process(proc, 200, "torchrun", "/dev/nvidiactl", "/dev/nvidia3")  # CUDA job
    _process(proc, 300, "nvidia-persistenced", "/dev/nvidia0")  # daemon, ignored
    _process(proc, 400, "Xorg", "/dev/dri/card0", "/dev/nvidiactl")  # no compute device
    _process(proc, 500, "agent", "/dev/kfd")  # ourselves
    (proc / "self").mkdir()
    users = gpu_device_users(proc, frozenset({"nvidia-persistenced"}), frozenset({500}))
    assert sorted(users) == ["100 (python)", "200 (torchrun)"]


def test_gpu_device_users_on_this_machine_excluding_ourselves() -> None:
    users = gpu_device_users(Path("/proc"), frozenset(), frozenset({os.getpid()}))
    assert isinstance(users, list)  # no GPU here: whatever it finds must be real device holders
    assert all(u.split()[0].isdigit() for u in users)


def test_amdgpu_utilization_from_captured_sysfs() -> None:
    assert amdgpu_utilization(SYSFS) == {"card0": 4.0}
    assert amdgpu_utilization(SYSFS / "nowhere") == {}


def test_listening_ports_sees_a_real_listening_socket() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        assert port in listening_ports(Path("/proc/net/tcp").read_text())
    assert port not in listening_ports(Path("/proc/net/tcp").read_text())


def test_idle_node_has_no_reasons(tmp_path: Path) -> None:
    cfg = GpuProbeSettings(**idle_roots(tmp_path))
    assert busy_reasons(cfg) == []


def test_each_signal_makes_the_node_busy(tmp_path: Path) -> None:
    roots = idle_roots(tmp_path)
    proc = roots["proc_root"]
    # amdgpu at 4% (captured): busy only under a 3% threshold.
    assert busy_reasons(GpuProbeSettings(proc_root=proc, sys_root=SYSFS)) == []
    assert busy_reasons(GpuProbeSettings(proc_root=proc, sys_root=SYSFS, busy_util_pct=3)) == [
        "GPU utilization card0 4%"
    ]
    # RAS listening on 28028 (0x6D7C) in /proc/net/tcp6.
    (proc / "net" / "tcp6").write_text(
        "  sl  local_address                         remote_address                        st tx_queue rx_queue\n"
        "   0: 00000000000000000000000000000000:6D7C 00000000000000000000000000000000:0000 0A 00000000:00000000\n"
    )
    assert busy_reasons(GpuProbeSettings(**roots)) == [
        "RAS port 28028 is listening (an RCCL/NCCL job runs here)"
    ]
    (proc / "net" / "tcp6").unlink()
    # A fresh Inspector dump; an old one is not a job.
    dump = tmp_path / "dump"
    dump.mkdir()
    log = dump / "node-a-pid42.log"
    log.write_text("{}\n")
    cfg = GpuProbeSettings(**roots, inspector_dump_dir=dump, inspector_fresh_s=60)
    [reason] = busy_reasons(cfg)
    assert reason.startswith(f"Inspector dump dir {dump} written")
    old = time.time() - 600
    os.utime(log, (old, old))
    assert busy_reasons(cfg) == []
    # A process on /dev/kfd.
    _process(proc, 77, "python3", "/dev/kfd")
    assert busy_reasons(GpuProbeSettings(**roots)) == ["processes using GPUs: 77 (python3)"]
