"""A real rate-limited link: network namespaces joined to this host by veth pairs, one of them shaped with ``tbf``.

Probe servers run as ``ranksight probe serve`` inside the namespaces; the probe client runs here, so every byte crosses
a veth. Needs root and iproute2; skipped with the reason when namespaces cannot be made.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from ranksight.agent.probe.client import ProbeBudget, run_probe
from ranksight.aggregator.analysis.links import LinkDegradedRule
from ranksight.aggregator.state import NS, LiveState
from ranksight.schemas.envelope import Envelope
from ranksight.schemas.records import ProbeRecord
from ranksight.schemas.wire import event_type

RATE_BPS = 40_000_000
PORT = 28177
TAG = f"rs6{os.getpid() % 10000}"


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


def _can_make_namespaces() -> str | None:
    if os.geteuid() != 0:
        return "network namespaces need root"
    if not shutil.which("ip") or not shutil.which("tc"):
        return "iproute2 (ip, tc) is not installed"
    try:
        _ip("netns", "add", f"{TAG}probe")
        _ip("netns", "del", f"{TAG}probe")
    except (subprocess.CalledProcessError, OSError) as exc:
        return f"cannot create a network namespace here: {getattr(exc, 'stderr', exc)!r}"
    return None


@pytest.fixture
def namespaces() -> Iterator[list[str]]:
    """Three namespaces 10.77.<i>.2 behind veths; the third link is shaped to RATE_BPS in both directions."""
    reason = _can_make_namespaces()
    if reason:
        pytest.skip(reason)
    made, servers, addrs = [], [], []
    try:
        for i in (1, 2, 3):
            ns, host_if, ns_if = f"{TAG}n{i}", f"{TAG}h{i}", f"{TAG}p{i}"
            _ip("netns", "add", ns)
            made.append(ns)
            _ip("link", "add", host_if, "type", "veth", "peer", "name", ns_if)
            _ip("link", "set", ns_if, "netns", ns)
            _ip("addr", "add", f"10.77.{i}.1/24", "dev", host_if)
            _ip("link", "set", host_if, "up")
            _ip("-n", ns, "addr", "add", f"10.77.{i}.2/24", "dev", ns_if)
            _ip("-n", ns, "link", "set", ns_if, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            if i == 3:
                for prefix in ([], ["ip", "netns", "exec", ns]):
                    dev = ns_if if prefix else host_if
                    subprocess.run([*prefix, "tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate",
                                    f"{RATE_BPS}bit", "burst", "16kb", "latency", "200ms"],
                                   check=True, capture_output=True, timeout=10)  # fmt: skip
            cmd = ["ip", "netns", "exec", ns, sys.executable, "-m", "ranksight.cli", "probe", "serve",
                   "--port", str(PORT), "--allow", "10.77.0.0/16"]  # fmt: skip
            servers.append(subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True))
            addrs.append(f"10.77.{i}.2")
        for server in servers:
            assert server.stderr is not None
            assert "probe server on port" in server.stderr.readline()
        yield addrs
    finally:
        for server in servers:
            server.terminate()
            server.wait(10)
        for ns in made:
            subprocess.run(
                ["ip", "netns", "del", ns], capture_output=True, timeout=10
            )  # takes its veth end along
        for i in (1, 2, 3):
            subprocess.run(["ip", "link", "del", f"{TAG}h{i}"], capture_output=True, timeout=10)


async def test_limited_link_measures_its_rate_and_is_flagged_degraded(namespaces: list[str]) -> None:
    results = {}
    for addr in namespaces:
        limited = addr == namespaces[-1]
        budget = ProbeBudget(echo_count=20, bytes=64 * 1024**2, seconds=1.0 if limited else 0.2)
        results[addr] = await run_probe(addr, PORT, budget)
    slow = results[namespaces[-1]]
    assert slow.upload_bps == pytest.approx(RATE_BPS, rel=0.15)
    assert slow.download_bps == pytest.approx(RATE_BPS, rel=0.15)
    for addr in namespaces[:-1]:
        assert results[addr].upload_bps and results[addr].upload_bps > 5 * RATE_BPS

    # The measurements as the aggregator receives them: only the shaped link is degraded.
    state = LiveState()
    now = time.time_ns()
    for seq, (addr, r) in enumerate(results.items(), start=1):
        rec = ProbeRecord(src="hub", dst=f"node-{addr}", dst_addr=addr, **r.as_dict())
        env = Envelope(type=event_type("probe"), cluster="c", node="hub", agent="hub-1", seq=seq, ts=now, ttl=60,
                       records=[rec])  # fmt: skip
        state.observe(env, now)
    state.tick(now + NS)
    flagged = [c.key for c in LinkDegradedRule().evaluate(state, now + NS)]
    assert flagged == [f"hub->node-{namespaces[-1]}/tcp/{namespaces[-1]}"]
