"""The Xid policy end to end: kernel log lines (a FIFO standing in for /dev/kmsg, fed the driver's lines of
fixtures/kernel) -> the real agent's xid collector -> NATS -> the aggregator's gpu_xid alert, classed by the Xid
catalog -> a policy acting only on the classes that need the node out (reboot, drain): Xid 79 is acted on, Xid 13
(restart the app) alerts but is not, and an operator's override makes Xid 13 a drain."""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from ranksight.aggregator.actions.settings import ActionSettings
from ranksight.settings import Settings
from tests.support import agent, aggregator, wait_for

KERNEL = Path(__file__).resolve().parents[2] / "fixtures" / "kernel"
LEDGER_SCRIPT = ("import json, sys; f = json.load(sys.stdin); "
                 "open(sys.argv[1], 'a').write(f\"{f['node']} {f['detail']['evidence']['xid']}\\n\")")  # fmt: skip


@pytest.fixture
def kmsg() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="rs-kmsg-") as d:
        path = Path(d) / "kmsg"
        os.mkfifo(path)
        yield path


def xid_settings(settings: Settings, kmsg: Path, ledger: Path, **actions: object) -> Settings:
    settings.agent.collectors.xid.kmsg_path = kmsg
    settings.agent.collectors.xid.interval_s = 0.1
    policy = {
        "name": "xid-drain",
        "rules": ["gpu_xid"],
        "xid_resolutions": ["reboot", "drain"],
        "action": "command",
    }
    settings.aggregator.actions = ActionSettings(
        mode="enforce", policies=[policy], max_cluster_fraction=1.0,  # type: ignore[list-item]
        command={"argv": [sys.executable, "-c", LEDGER_SCRIPT, str(ledger)]}, **actions)  # type: ignore[arg-type]  # fmt: skip
    return settings


async def feed(kmsg: Path, text: str) -> None:
    def write() -> None:
        with open(kmsg, "w") as pipe:  # blocks until the collector has it open
            pipe.write(text)

    await asyncio.wait_for(asyncio.to_thread(write), 20)


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


async def test_xid_79_is_acted_on_xid_13_only_alerts(settings: Settings, kmsg: Path, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    cfg = xid_settings(settings, kmsg, ledger)
    async with aggregator(cfg) as agg, agent(cfg, only=["xid"]):
        await feed(kmsg, (KERNEL / "nvidia-xid-kmsg.txt").read_text() + "4,1030,5300000,-;NVRM: Xid (PCI:0000:cb:00): "
                   "13, pid='<unknown>', name=<unknown>, Graphics SM Warp Exception\n")  # fmt: skip
        fired = await wait_for(lambda: {a.evidence["xid"]: a for a in agg.engine.active.values()
                                        if a.rule == "gpu_xid"} if len(agg.engine.active) >= 3 else None, timeout=20)  # fmt: skip
        assert {x: (a.severity, a.evidence["resolution"]) for x, a in fired.items()} == {
            79: ("critical", "reboot"), 94: ("warning", "restart_app"), 13: ("warning", "restart_app")}  # fmt: skip
        await wait_for(lambda: lines(ledger) == ["node-a 79"], timeout=20)
        await asyncio.sleep(1.0)
        await agg.actions.runner.wait_idle(10)
        assert lines(ledger) == ["node-a 79"]


async def test_an_override_turns_xid_13_into_a_drain(settings: Settings, kmsg: Path, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    cfg = xid_settings(settings, kmsg, ledger, xid={"13": "drain"})
    async with aggregator(cfg) as agg, agent(cfg, only=["xid"]):
        await feed(kmsg, "NVRM: Xid (PCI:0000:cb:00): 13, pid=77, name=train, Graphics SM Warp Exception\n")
        await wait_for(lambda: lines(ledger) == ["node-a 13"], timeout=20)
        [alert] = [a for a in agg.engine.active.values() if a.rule == "gpu_xid"]
        assert alert.severity == "critical" and alert.evidence["resolution"] == "drain"
