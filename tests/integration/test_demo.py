"""``ranksight demo`` on its defaults: real agents and a real aggregator watch a simulated cluster, every injected fault
raises its alert within the run, and everything stops cleanly."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import duckdb

from ranksight.agent.collectors.inspector.settings import InspectorSettings
from ranksight.settings import Settings
from tests.support import ranksight_cmd, run_cli, settings_env


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
    assert ("rank_missing", "demo-node003") in rules  # the lost rank's node
    [straggler] = {
        evidence for rule, node, evidence in alerts if rule == "straggler" and node == "demo-node001"
    }
    finding = json.loads(straggler)
    assert finding["rank"] == 2 and finding["comm"] == "tp-n1"  # GPU 2 of node 1: rank 2 of its node's comm
    assert any("GPU 2 clock" in c for c in finding["corroboration"])  # the simulated sysfs tree backs it up
    faulty = {None, "demo-node001", "demo-node002"}
    assert not {(rule, node) for rule, node in rules if node not in faulty} - {
        ("rank_missing", "demo-node003")
    }
    # One incident per fault, no flapping: every alert fired once (state changes counted per fingerprint), and the
    # node-level faults are exactly one incident each, naming the node and the entity.
    changes = con.execute(
        "SELECT fingerprint, count(*) FILTER (state = 'firing') FROM alerts GROUP BY ALL"
    ).fetchall()
    assert max(n for _, n in changes) == 1, changes
    by_node = con.execute(
        "SELECT rule, node, entity FROM alerts WHERE state = 'firing' AND rule IN ('nic_errors_rising', 'straggler') "
        "ORDER BY ALL"
    ).fetchall()
    assert [(rule, node) for rule, node, _ in by_node] == [
        ("nic_errors_rising", "demo-node002"), ("straggler", "demo-node001")]  # fmt: skip
    assert [entity.split()[0] for _, _, entity in by_node] == ["nic", "pid"]
    # the online engine ran on the agents' summaries, published in parts; raw records went out as a rate-limited sample
    [(part_us, summarized)] = con.execute("SELECT min(part_us), sum(count) FROM inspector_summary").fetchall()
    # seq 0: fetched on a finding, not published
    [(raw,)] = con.execute("SELECT count(*) FROM inspector WHERE seq > 0").fetchall()
    # the sample is the agents' raw rate limit (4 agents for 75 s at most); summaries carry every record (how many
    # the job wrote in that time depends on the machine's load: several times the sample)
    limit = 4 * InspectorSettings().raw_rate_per_s * 75
    publish_us = round(InspectorSettings().summary_publish_s * 1e6)
    assert part_us == publish_us and 0 < raw <= limit and summarized > 4 * raw, (part_us, summarized, raw)
    nodes = {n for (n,) in con.execute("SELECT DISTINCT node FROM heartbeat").fetchall()}
    assert nodes == {f"demo-node{i:03d}" for i in range(4)}
    assert con.execute("SELECT count(DISTINCT node) FROM gpu WHERE source = 'sysfs'").fetchone() == (4,)
    [(host, gpus)] = con.execute(
        "SELECT DISTINCT host, gpus FROM ras_event WHERE event = 'PEER_DEAD'"
    ).fetchall()
    assert host == "demo-node003" and json.loads(gpus) == [5]


def test_demo_on_ctrl_c_exits_130_and_leaves_no_temporary_directory(
    settings: Settings, tmp_path: Path
) -> None:
    env = settings_env(settings)
    for own in ("RANKSIGHT_NATS__URL", "RANKSIGHT_STATE_DIR", "RANKSIGHT_CLUSTER"):
        env.pop(own)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env["TMPDIR"] = str(tmp)  # where the demo makes its state dir when none is given
    log = (
        tmp_path / "stderr.log"
    )  # a file, not a pipe: unread, the demo's logging would fill a pipe and block it
    with log.open("w") as stderr:
        proc = subprocess.Popen(
            ranksight_cmd("demo"), env=env, stdout=subprocess.PIPE, stderr=stderr, text=True
        )
    try:
        assert proc.stdout is not None
        banner = [proc.stdout.readline() for _ in range(2)]
        assert "simulated nodes" in banner[0] and str(tmp) in banner[1], (banner, log.read_text()[-3000:])
        proc.send_signal(signal.SIGINT)
        try:
            proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGUSR1)  # every thread's stack, to say where it is stuck
            time.sleep(2)
            proc.kill()
            proc.communicate()
            raise AssertionError(f"the demo did not stop on SIGINT: {log.read_text()[-6000:]}") from None
    finally:
        proc.kill()
    err = log.read_text()
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    assert not list(tmp.iterdir()), "the demo left temporary files behind"
