"""``ranksight demo`` on its defaults: real agents and a real aggregator watch a simulated cluster, every injected fault
raises its alert within the run, and everything stops cleanly."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb

from ranksight.config import Settings
from tests.support import run_cli, settings_env


def test_demo_raises_the_injected_faults_and_stops(settings: Settings, tmp_path: Path) -> None:
    env = settings_env(settings)  # the test's HTTP port 0; the demo starts its own NATS, in its own state dir
    for own in ("RANKSIGHT_NATS__URL", "RANKSIGHT_STATE_DIR", "RANKSIGHT_CLUSTER"):
        env.pop(own)
    state = tmp_path / "demo"
    proc = run_cli(
        "demo", "--state-dir", str(state), "--duration", "75", "--fault-after", "5", env=env, timeout=200
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ranksight demo: 4 simulated nodes x 8 GPUs" in proc.stdout
    assert "Traceback" not in proc.stderr and " failed: " not in proc.stderr, proc.stderr[-3000:]

    con = duckdb.connect(str(state / "ranksight.duckdb"), read_only=True)
    alerts = con.execute("SELECT DISTINCT rule, node, evidence FROM alerts WHERE state = 'firing'").fetchall()
    rules = {(rule, node) for rule, node, _ in alerts}
    assert ("nic_errors_rising", "demo-node002") in rules
    assert "rank_missing" in {rule for rule, _ in rules}
    [straggler] = {
        evidence for rule, node, evidence in alerts if rule == "straggler" and node == "demo-node001"
    }
    finding = json.loads(straggler)
    assert finding["rank"] == 2 and finding["comm"] == "tp-n1"  # GPU 2 of node 1: rank 2 of its node's comm
    assert any("GPU 2 clock" in c for c in finding["corroboration"])  # the simulated sysfs tree backs it up
    assert not {rule for rule, node in rules if node not in (None, "demo-node001", "demo-node002")}
    # One incident per fault, no flapping: every alert fired once (state changes counted per fingerprint), and the
    # node-level faults are exactly one incident each, naming the node and the entity.
    changes = con.execute(
        "SELECT fingerprint, count(*) FILTER (state = 'firing') FROM alerts GROUP BY ALL"
    ).fetchall()
    assert max(n for _, n in changes) == 1, changes
    by_node = con.execute(
        "SELECT rule, node, entity FROM alerts WHERE state = 'firing' AND node IS NOT NULL ORDER BY ALL"
    ).fetchall()
    assert [(rule, node) for rule, node, _ in by_node] == [
        ("nic_errors_rising", "demo-node002"), ("straggler", "demo-node001")]  # fmt: skip
    assert [entity.split()[0] for _, _, entity in by_node] == ["nic", "pid"]
    nodes = {n for (n,) in con.execute("SELECT DISTINCT node FROM heartbeat").fetchall()}
    assert nodes == {f"demo-node{i:03d}" for i in range(4)}
    assert con.execute("SELECT count(DISTINCT node) FROM gpu WHERE source = 'sysfs'").fetchone() == (4,)
    [(host, gpus)] = con.execute(
        "SELECT DISTINCT host, gpus FROM ras_event WHERE event = 'PEER_DEAD'"
    ).fetchall()
    assert host == "demo-node003" and json.loads(gpus) == [5]
