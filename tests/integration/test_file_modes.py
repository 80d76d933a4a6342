"""Local state is private: ``ranksight up`` keeps its state dir 0700 and every file in it (DuckDB file, WAL, temp,
JetStream store) without group or other access, from the start; an older state dir left open is closed."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import time
from pathlib import Path

from ranksight.aggregator.store import Store
from ranksight.settings import Settings
from tests.support import ranksight_cmd, settings_env


def open_to_others(root: Path) -> list[str]:
    found = []
    for path in [root, *root.rglob("*")]:
        mode = path.lstat().st_mode
        if not stat.S_ISSOCK(mode) and mode & 0o077:
            found.append(f"{path.relative_to(root.parent)} {stat.filemode(mode)}")
    return found


def test_up_creates_private_state(settings: Settings, tmp_path: Path) -> None:
    state = tmp_path / "up"
    state.mkdir(mode=0o755)
    state.chmod(0o755)  # as an older version left it
    env = settings_env(settings)
    env.pop("RANKSIGHT_NATS__URL")
    env.pop("RANKSIGHT_STATE_DIR")  # --state-dir names it
    env.update(RANKSIGHT_AGENT__COLLECTORS__HEARTBEAT__INTERVAL_S="0.2", RANKSIGHT_AGENT__NODE="node-a")
    others = ("RAS", "INSPECTOR", "GPU", "NIC", "PROBE", "GPU_PROBE", "APP")
    env.update({f"RANKSIGHT_AGENT__COLLECTORS__{c}__ENABLED": "false" for c in others})
    proc = subprocess.Popen(ranksight_cmd("up", "--state-dir", str(state), "--nats-port", "0"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)  # fmt: skip
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 30
        while "Ctrl-C stops everything" not in proc.stdout.readline():
            assert proc.poll() is None and time.monotonic() < deadline, "up did not start"
        time.sleep(2)  # heartbeats stored: the WAL and the JetStream store have data
        assert (state / "ranksight.duckdb.wal").exists()
        assert open_to_others(state) == []
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
    assert open_to_others(state) == []


def test_store_closes_an_open_database_file(tmp_path: Path) -> None:
    db = tmp_path / "new" / "ranksight.duckdb"
    store = Store(db)
    store.open()
    store.close_connection()
    assert stat.S_IMODE(db.parent.stat().st_mode) == 0o700 and stat.S_IMODE(db.stat().st_mode) == 0o600
    os.chmod(db, 0o644)  # a database file from before
    store.open()
    store.close_connection()
    store.shutdown()
    assert stat.S_IMODE(db.stat().st_mode) == 0o600
