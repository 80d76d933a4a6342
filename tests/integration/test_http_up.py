"""``ranksight up`` serves the HTTP face on localhost and prints its address on startup."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

from tests.support import ranksight_cmd, settings_env


def test_up_prints_the_http_address_and_serves_it(settings, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    env = settings_env(settings)
    env.pop("RANKSIGHT_NATS__URL")  # up starts its own NATS
    env.update(RANKSIGHT_AGGREGATOR__HTTP__PORT="0", RANKSIGHT_AGENT__COLLECTORS__HEARTBEAT__INTERVAL_S="0.2")
    not_needed = ("RAS", "INSPECTOR", "GPU", "NIC", "GPU_PROBE")  # probe and app stay: the banner lists them
    env.update(RANKSIGHT_AGENT__COLLECTORS__PROBE__PORT="0")
    env.update({f"RANKSIGHT_AGENT__COLLECTORS__{c}__ENABLED": "false" for c in not_needed})
    proc = subprocess.Popen([*ranksight_cmd("up", "--state-dir", str(tmp_path / "up"), "--nats-port", "0")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)  # fmt: skip
    try:
        url, text = None, ""
        deadline = time.monotonic() + 30
        assert proc.stdout is not None
        while url is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            assert line, f"up exited: {proc.stderr.read() if proc.stderr else ''}"
            match = re.search(r"^\s+http\s+(http://127\.0\.0\.1:\d+)$", line.rstrip())
            url = match.group(1) if match else None
        assert url, "no http address printed"
        banner = [line]
        while not banner[-1].startswith("Ctrl-C"):
            banner.append(proc.stdout.readline())
        text = "".join(banner)
        # the banner says where the state lives and names a command that works from this shell
        assert re.search(rf"^\s+state\s+{re.escape(str(tmp_path / 'up'))}\s", text, re.M), text
        [tried] = re.findall(r"^\s+try\s+(.+)$", text, re.M)
        # the banner comes as the processes start; the agent's first heartbeat follows it shortly
        while True:
            answer = subprocess.run(tried, shell=True, capture_output=True, text=True, env=env, timeout=60)
            if "alive" in answer.stdout or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert answer.returncode == 0 and "alive" in answer.stdout, (tried, answer.stderr)
        body: dict = {}
        while time.monotonic() < deadline and not body.get("rows"):
            with urllib.request.urlopen(f"{url}/api/status", timeout=5) as resp:
                body = json.loads(resp.read())
            time.sleep(0.2)
        assert body["ok"] and body["rows"][0]["state"] == "alive"
        with urllib.request.urlopen(f"{url}/", timeout=5) as resp:
            assert b"ranksight" in resp.read()
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
    assert proc.returncode == 130  # Ctrl-C, as a shell reports it
    assert proc.stderr is not None
    assert proc.stderr.read().count("migration") <= 1  # a fresh database: one line, not one per migration
    assert proc.stdout is not None
    # the banner lists every port and socket it listens on
    assert re.search(r"^\s+probe\s+port ", text, re.M) and re.search(r"^\s+app socket\s+/", text, re.M), text
