"""``ranksight demo`` at 8 nodes for two minutes, every alert's state changes counted (on the alert subject and in the
store): each injected fault is exactly one incident naming its node (the slow GPU's ``straggler``, the erring NIC's
``nic_errors_rising``, the lost rank's ``rank_missing`` naming node, host, pid and GPU), nothing else raises an
incident (no ``comm_hang`` at job start, no ``link_degraded`` from probes on a loaded host), and no alert changes state
more than its fault explains: each fires once and stays firing. (The full check, 32 nodes for 10 minutes, is the same
command with ``--nodes 32 --duration 600``.)"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections import Counter
from pathlib import Path

import duckdb
import nats

from ranksight.schemas.subjects import Subjects
from ranksight.settings import Settings
from tests.support import ranksight_cmd, settings_env

NODES = 8
# the injected faults (ranksight/demo.py) and the one incident each must raise: (rule, node)
FAULTS = {("straggler", "demo-node001"), ("nic_errors_rising", "demo-node002"),
          ("rank_missing", f"demo-node{NODES - 1:03d}")}  # fmt: skip


async def _quiet(exc: Exception) -> None:
    """Refused connects while the demo's nats-server starts are expected."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_demo_raises_one_incident_per_injected_fault_and_nothing_else(
    settings: Settings, tmp_path: Path
) -> None:
    env = settings_env(settings)
    for own in ("RANKSIGHT_NATS__URL", "RANKSIGHT_STATE_DIR", "RANKSIGHT_CLUSTER"):
        env.pop(own)
    port, state = free_port(), tmp_path / "demo"
    demo = await asyncio.create_subprocess_exec(
        *ranksight_cmd("demo", "--nodes", str(NODES), "--state-dir", str(state), "--nats-port", str(port),
                       "--duration", "120", "--fault-after", "10"),
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    alerts: list[dict[str, object]] = []
    nc = None
    try:
        for _ in range(400):  # the embedded nats-server comes up before the aggregator and the agents
            with contextlib.suppress(Exception):
                nc = await nats.connect(
                    f"nats://127.0.0.1:{port}", max_reconnect_attempts=0, connect_timeout=0.5
                )
                break
            await asyncio.sleep(0.05)
        assert nc is not None, "the demo's nats-server did not come up"

        async def on_alert(msg: nats.aio.msg.Msg) -> None:
            alerts.append(json.loads(msg.data))

        await nc.subscribe(Subjects(settings.subject_prefix).alerts_filter("demo"), cb=on_alert)
        stdout, stderr = await asyncio.wait_for(demo.communicate(), timeout=360)
    finally:
        if demo.returncode is None:
            demo.kill()
            await demo.wait()
        if nc is not None:
            await nc.close()
    assert demo.returncode == 0, stderr.decode()[-3000:]
    assert b"stopped answering" in stdout

    firing = [a for a in alerts if a["state"] == "firing"]
    assert not [a for a in firing if a["rule"] == "comm_hang"]
    missing = [a for a in firing if a["rule"] == "rank_missing"]
    assert len(missing) == 1, "\n".join(f"{a['rule']} {a['state']} {a['job']} {a['summary']}" for a in alerts)
    [alert] = missing
    evidence = alert["evidence"]
    assert isinstance(evidence, dict)
    assert alert["node"] == f"demo-node{NODES - 1:03d}" and evidence["host"] == alert["node"]
    assert (
        evidence["gpus"] == [5] and evidence["lines"]
    )  # the comms come with the status, after the instant alert
    resolved_and_refired = [a for a in alerts if a["rule"] == "rank_missing" and a["state"] == "resolved"]
    assert not resolved_and_refired  # the process stays missing until the demo stops: no flapping
    con = duckdb.connect(str(state / "ranksight.duckdb"), read_only=True)
    stored = con.execute(
        "SELECT rule FROM alerts WHERE state = 'firing' AND rule IN ('rank_missing', 'comm_hang')"
    )
    assert [r for (r,) in stored.fetchall()] == ["rank_missing"]  # the subject and the store agree

    # Every state change of every alert: the injected faults' incidents, once each, and nothing else.
    transitions = con.execute(
        "SELECT rule, node, severity, state, fingerprint, summary FROM alerts ORDER BY updated_at"
    ).fetchall()
    con.close()
    told = "\n".join(f"{rule} {node} {st} {summary}" for rule, node, _, st, _, summary in transitions)
    incidents = [t for t in transitions if t[2] != "info"]  # lifecycle (job_started) is not an incident
    assert {(rule, node) for rule, node, *_ in incidents} == FAULTS, told
    changes = Counter((rule, node, st) for rule, node, _, st, *_ in incidents)
    assert changes == Counter({(rule, node, "firing"): 1 for rule, node in FAULTS}), (
        told
    )  # no resolve, no re-fire
    assert {fp for *_, fp, _ in incidents} == {fp for *_, st, fp, _ in incidents if st == "firing"}
    lifecycle = Counter((rule, st) for rule, _, severity, st, *_ in transitions if severity == "info")
    assert lifecycle == Counter({("job_started", "firing"): 1}), told  # one job, running all along
    # the subject told the same story (nothing was silenced)
    assert sorted((a["rule"], a["state"]) for a in alerts) == sorted((t[0], t[3]) for t in transitions)
