"""``ranksight demo --nodes 32`` (32 real agents, a real aggregator, the embedded nats-server, a simulated job with its
injected faults) with an action policy in enforce mode from a config file: exactly the three faulty nodes are acted on,
each once, and the audit in the demo's DuckDB says so."""

from __future__ import annotations

import sys
from pathlib import Path

import duckdb

from ranksight.settings import Settings
from tests.support import run_cli, settings_env

LEDGER_SCRIPT = """import json, sys
finding = json.load(sys.stdin)
with open(sys.argv[1], "a") as ledger:
    ledger.write(f"{finding['rule']} {finding['node']}\\n")
"""


def test_demo_of_32_nodes_acts_on_exactly_the_faulty_nodes_once(settings: Settings, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    script = tmp_path / "ledger.py"
    script.write_text(LEDGER_SCRIPT)
    config = tmp_path / "policy.toml"
    argv = ", ".join(f'"{a}"' for a in (sys.executable, script, ledger))
    config.write_text(f"""
[aggregator.actions]
mode = "enforce"
max_nodes_per_window = 5
max_cluster_fraction = 0.25

[aggregator.actions.command]
argv = [{argv}]

[[aggregator.actions.policies]]
name = "take-out-faulty"
rules = ["nic_errors_rising", "rank_missing", "straggler"]
action = "command"
""")
    env = settings_env(settings)  # the test's HTTP port 0; the demo starts its own NATS, in its own state dir
    for own in ("RANKSIGHT_NATS__URL", "RANKSIGHT_STATE_DIR", "RANKSIGHT_CLUSTER"):
        env.pop(own)
    state = tmp_path / "demo"
    proc = run_cli("demo", "--nodes", "32", "--config", str(config), "--state-dir", str(state), "--duration", "100",
                   "--fault-after", "5", env=env, timeout=280)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ranksight demo: 32 simulated nodes x 8 GPUs" in proc.stdout
    assert sorted(ledger.read_text().splitlines()) == [
        "nic_errors_rising demo-node002", "rank_missing demo-node031", "straggler demo-node001"]  # fmt: skip
    con = duckdb.connect(str(state / "ranksight.duckdb"), read_only=True)
    done = con.execute(
        "SELECT node, count(*) FROM action_audit WHERE step = 'done' GROUP BY node ORDER BY node"
    ).fetchall()
    assert done == [("demo-node001", 1), ("demo-node002", 1), ("demo-node031", 1)]
    assert con.execute(
        "SELECT count(*) FROM action_audit WHERE step IN ('failed', 'refused')"
    ).fetchone() == (0,)
