"""The files operators install from ``deploy/``: each parsed, and validated where the validator is installed."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
import yaml

from ranksight.core.natsserver import find_nats_server
from ranksight.deploy.plan import UNIT_TEMPLATE, Layout, systemd_unit

UNITS = UNIT_TEMPLATE.parent  # the systemd units ship inside the package (ranksight deploy writes them)

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
UNITS = (
    Path(__file__).resolve().parents[2] / "src" / "ranksight" / "deploy" / "systemd"
)  # installed by deploy


@pytest.mark.parametrize("unit", ["ranksight-agent.service", "ranksight-aggregator.service"])
def test_systemd_units_verify(unit: str, tmp_path: Path) -> None:
    text = (UNITS / unit).read_text()
    assert "Restart=always" in text and "NoNewPrivileges=yes" in text and "ProtectSystem=strict" in text
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze not installed")
    binary = tmp_path / "venv/bin/ranksight"
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    rendered = tmp_path / unit
    rendered.write_text(
        systemd_unit(Layout(str(tmp_path)))
        if unit.startswith("ranksight-agent")
        else text.replace("/opt/ranksight", str(tmp_path))
    )
    proc = subprocess.run(["systemd-analyze", "verify", str(rendered)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_k8s_daemonset_host_network_readonly_sys_limits() -> None:
    [ds] = list(yaml.safe_load_all((DEPLOY / "k8s/agent-daemonset.yaml").read_text()))
    assert ds["kind"] == "DaemonSet"
    pod = ds["spec"]["template"]["spec"]
    assert pod["hostNetwork"] is True
    [container] = pod["containers"]
    sys_mount = next(m for m in container["volumeMounts"] if m["name"] == "sys")
    assert sys_mount["readOnly"] is True
    assert next(v for v in pod["volumes"] if v["name"] == "sys")["hostPath"]["path"] == "/sys"
    assert set(container["resources"]["limits"]) == {"cpu", "memory"}
    assert (
        ds["spec"]["selector"]["matchLabels"].items() <= ds["spec"]["template"]["metadata"]["labels"].items()
    )


def test_k8s_nats_and_aggregator_statefulsets() -> None:
    docs = list(yaml.safe_load_all((DEPLOY / "k8s/nats-aggregator.yaml").read_text()))
    kinds = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert kinds == {("Service", "nats"), ("StatefulSet", "nats"), ("StatefulSet", "ranksight-aggregator")}
    for doc in docs:
        if doc["kind"] == "StatefulSet":
            assert doc["spec"]["volumeClaimTemplates"]
            assert all(c["resources"]["limits"] for c in doc["spec"]["template"]["spec"]["containers"])


def test_nats_config_is_valid_and_limits_agents_to_their_node() -> None:
    conf = DEPLOY / "nats/nats-server.conf"
    proc = subprocess.run([str(find_nats_server()), "-t", "-c", str(conf)], capture_output=True, text=True)
    assert proc.returncode == 0 and "is valid" in proc.stdout + proc.stderr, proc.stderr
    text = conf.read_text()
    assert "jetstream" in text and '"ranksight.v1.ev.prod-a.gpu-node-001.>"' in text


def _run(script: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", str(DEPLOY / "slurm" / script)], capture_output=True, text=True,
                          env={"PATH": os.environ["PATH"], **env})  # fmt: skip


def test_slurm_prolog_registers_epilog_unregisters(tmp_path: Path) -> None:
    jobs = tmp_path / "jobs"
    env = {"RANKSIGHT_JOBS_DIR": str(jobs), "SLURM_JOB_ID": "4242", "SLURM_JOB_USER": "alice",
           "SLURM_JOB_NODELIST": "gpu-[001-004]"}  # fmt: skip
    assert _run("prolog.sh", env).returncode == 0
    registered = (jobs / "4242.env").read_text()
    assert "SLURM_JOB_NODELIST=gpu-[001-004]" in registered and "SLURM_JOB_USER=alice" in registered
    assert _run("epilog.sh", env).returncode == 0
    assert not (jobs / "4242.env").exists()


def test_slurm_scripts_exit_0_when_they_cannot_work(tmp_path: Path) -> None:
    blocked = tmp_path / "file-not-dir"
    blocked.write_text("")
    for script in ("prolog.sh", "epilog.sh"):
        assert stat.S_IMODE((DEPLOY / "slurm" / script).stat().st_mode) & 0o111
        assert (
            _run(script, {"RANKSIGHT_JOBS_DIR": str(blocked / "jobs"), "SLURM_JOB_ID": "1"}).returncode == 0
        )
        assert _run(script, {}).returncode == 0


def test_both_units_read_their_config_from_etc_ranksight_and_deploy_points_at_its_own() -> None:
    """Issue 47: the agent unit read /opt/ranksight/agent.toml, the aggregator's /etc/ranksight/aggregator.toml."""
    for name in ("agent", "aggregator"):
        text = (UNITS / f"ranksight-{name}.service").read_text()
        [start] = [line for line in text.splitlines() if line.startswith("ExecStart=")]
        assert start.endswith(f" {name} --config /etc/ranksight/{name}.toml"), start
    layout = Layout("/home/ops/.ranksight")
    [start] = [line for line in systemd_unit(layout).splitlines() if line.startswith("ExecStart=")]
    assert start == f"ExecStart={layout.agent_bin} agent --config {layout.config}"
