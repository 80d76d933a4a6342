"""Every query command's table on one simulated cluster (``tests/http_cluster.py``: four nodes, a RAS job with a
dead process, a degraded link, GPUs and NICs), compared with ``tests/golden/<command>.txt``: readable headers, human
units, the rank and health words where they belong, and an empty answer that says so. Cells that change from run to
run (times, clock skew, durations) are masked. ``UPDATE_GOLDEN=1`` rewrites the files (review the diff)."""

from __future__ import annotations

import asyncio
import os
import re
import time
from pathlib import Path

import pytest

from ranksight.schemas.records import HeartbeatRecord
from ranksight.settings import Settings
from tests.http_cluster import NODES, Publisher, http_settings, publish_cluster
from tests.support import aggregator, run_cli_async, settings_env, wait_for

GOLDEN = Path(__file__).resolve().parent.parent / "golden"
COMMANDS = [["status"], ["nodes"], ["jobs"], ["comms"], ["gpus"], ["nics"], ["links"], ["cluster-map"], ["alerts"],
            ["stragglers"], ["node", "drains"], ["silence", "list"], ["markers"], ["gpu-probes"],
            ["nodes", "--health", "critical"]]  # fmt: skip
# columns whose cells are clocks or durations of this run
VOLATILE = {"LAST SEEN", "CLOCK SKEW", "LAST POLL", "MEASURED", "EXPIRES", "UPDATED AT", "SINCE", "FIRED", "RESOLVED",
            "DURATION", "STARTED AT", "TIME", "LATENESS"}  # fmt: skip


def normalized(stdout: str, stderr: str) -> str:
    """The table as rows of cells (split on runs of two or more spaces), volatile columns masked; then stderr."""
    lines = stdout.splitlines()
    out = []
    if lines:  # rows sorted: rows of one tick (alerts fired together) come in no fixed order
        header = re.split(r"\s{2,}", lines[0].strip())
        out.append(" | ".join(header))
        out += sorted(" | ".join("<masked>" if header[i:i + 1] and header[i] in VOLATILE else c
                                 for i, c in enumerate(re.split(r"\s{2,}", line.strip()))) for line in lines[1:])  # fmt: skip
    return "\n".join([*out, *(f"stderr: {line}" for line in stderr.splitlines())]) + "\n"


async def test_every_query_command_prints_its_golden_table(settings: Settings) -> None:
    cfg = http_settings(settings)
    async with aggregator(cfg) as agg, Publisher(cfg) as pub:
        await publish_cluster(pub, with_stragglers=False)
        await wait_for(lambda: len(agg.state.nodes.nodes) == 4 and len(agg.state.gpus.devices) == 4
                       and {a.rule for a in agg.engine.active.values()} >= {"link_degraded", "process_dead"},
                       timeout=20)  # fmt: skip
        await asyncio.sleep(1.0)  # one more tick: every rule has seen the whole cluster
        env = settings_env(cfg)
        update = os.environ.get("UPDATE_GOLDEN") == "1"
        mismatched = []
        for command in COMMANDS:
            for node in NODES:  # heartbeats keep coming, as from live agents: no node turns stale mid-test
                await pub.send(node, "heartbeat", [HeartbeatRecord(hostname=node, version="sim", pid=100,
                                                                   started_ns=time.time_ns())])  # fmt: skip
            await wait_for(lambda: all(n.state == "alive" for n in agg.state.nodes.nodes.values()))
            done = await run_cli_async(*command, env=env)
            assert done.returncode == 0, (command, done.stderr)
            got = normalized(done.stdout, done.stderr)
            golden = GOLDEN / f"{'-'.join(c.lstrip('-') for c in command)}.txt"
            if update:
                golden.write_text(got)
            elif golden.read_text() != got:
                mismatched.append(f"{golden.name}:\n--- expected\n{golden.read_text()}--- got\n{got}")
        assert not mismatched, "\n".join(mismatched)


@pytest.mark.parametrize("stdout", ["NODE  STATE\n", ""])
def test_normalized_masks_nothing_it_should_not(stdout: str) -> None:
    assert normalized(stdout, "") == ("NODE | STATE\n" if stdout else "\n")
