"""The agent process loads only what it needs: the real command (``ranksight agent``, which validates its settings then
becomes the agent process) runs as a child with every collector that applies here, publishes, stops on SIGTERM, and
reports the modules it held (``sys.modules`` at exit, written by a ``sitecustomize`` that the exec keeps)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import nats
import tomli_w

from ranksight.core.natsserver import NatsServer
from ranksight.schemas.subjects import Subjects
from ranksight.simulate.cluster import NodeSysfs
from ranksight.simulate.inspector import JobSpec, write_job
from ranksight.simulate.ras_server import PROFILES, FakeRasServer
from tests.conftest import FIXTURES
from tests.support import wait_for

# What only the aggregator, the query commands or deploy use: heavy, and never the agent's business; the XML parser,
# which only the nvidia-smi XML source uses; and aiohttp, which nats-py loads for its WebSocket transport alone (the
# servers here are nats:// ones). The agent does hold pydantic: its settings are the pydantic models that declare them.
NOT_FOR_THE_AGENT = ("duckdb", "pyarrow", "asyncssh", "prometheus_client", "aiohttp",
                     "ranksight.aggregator", "ranksight.deploy", "ranksight.schemas.alerts", "ranksight.schemas.api",
                     "xml", "pyexpat")  # fmt: skip


def _not_for_the_agent(module: str) -> bool:
    return any(module == name or module.startswith(name + ".") for name in NOT_FOR_THE_AGENT)


# Loaded by every Python process started with it on PYTHONPATH: the agent process (the exec'd ``-m ranksight.agent``)
# writes its modules to $MODULES_FILE at exit (after the SIGTERM stop).
SITECUSTOMIZE = """
import atexit, os, sys
def _write_modules():
    if sys.argv[0].endswith(os.path.join("agent", "__main__.py")):  # set once -m has found the module
        loaded = [name for name, module in sys.modules.items() if module is not None]  # None: an import refused
        open(os.environ["MODULES_FILE"], "w").write("\\n".join(sorted(loaded)))
atexit.register(_write_modules)
"""


def _config(tmp_path: Path, url: str, ras_addr: str) -> Path:
    dumps, sysfs = tmp_path / "dumps", NodeSysfs(tmp_path / "sys")
    write_job(JobSpec(nodes=1, gpus_per_node=2, pp=1, steps=20, hostname_prefix="node"), dumps)
    sysfs.write(time.time())
    config = {
        "cluster": "test",
        "state_dir": str(tmp_path / "state"),
        "nats": {"url": url},
        "agent": {
            "node": "node-a",
            "batch_max_delay_s": 0.05,
            "collectors": {
                "heartbeat": {"interval_s": 0.2, "jobs_dir": str(tmp_path / "jobs")},
                "ras": {"addr": ras_addr, "interval_s": 0.5},
                "inspector": {"dump_dir": str(dumps)},
                "gpu": {"sources": ["sysfs"], "sysfs_root": str(sysfs.root), "interval_s": 0.2},
                "nic": {"sysfs_root": str(sysfs.root), "tool_counters": False, "interval_s": 0.2},
                "probe": {
                    "port": 0,
                    "listen_host": "127.0.0.1",
                    "advertise": ["127.0.0.1"],
                    "interval_s": 0.2,
                },
            },
        },
    }
    path = tmp_path / "agent.toml"
    path.write_text(tomli_w.dumps(config))
    return path


async def test_agent_process_loads_no_aggregator_storage_or_http_server(
    tmp_path: Path, nats_server: NatsServer
) -> None:
    ras = await FakeRasServer(
        PROFILES["2.29"],
        status_text=(FIXTURES / "ras" / "rccl_2.28.3_text_status_healthy_1node_8gpu.txt").read_bytes(),
    ).start()
    nc = await nats.connect(nats_server.url)
    kinds: set[str] = set()

    async def seen(msg: nats.aio.msg.Msg) -> None:
        kinds.add(msg.subject.rsplit(".", 1)[1])

    await nc.subscribe(Subjects("ranksight.v1").events_filter("test"), cb=seen)
    modules_file = tmp_path / "modules.txt"
    config = _config(tmp_path, nats_server.url, ras.address)
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    # the sitecustomize first, then the path the tests run with (a checkout's src/ over an installed package)
    path = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path, "MODULES_FILE": str(modules_file)}
    command = [sys.executable, "-m", "ranksight.cli", "agent", "--config", str(config)]
    proc = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env)
    try:
        wanted = {"heartbeat", "inspector", "gpu", "nic", "probe_endpoint"}
        await wait_for(lambda: wanted <= kinds or proc.poll() is not None, timeout=60)
        assert wanted <= kinds, (
            f"published only {sorted(kinds)}: {proc.poll() and proc.stderr and proc.stderr.read()}"
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.to_thread(proc.communicate, timeout=30)
        await nc.close()
        await ras.stop()
    assert proc.returncode == 0, stderr
    modules = set(modules_file.read_text().split())
    assert (
        "ranksight.agent.collectors.inspector.collector" in modules
    )  # the running agent's modules, not an empty list
    loaded = sorted(filter(_not_for_the_agent, modules))
    assert loaded == []
