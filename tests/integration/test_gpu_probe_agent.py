"""The gpu_probe collector end to end: real nats-server, agent, aggregator and DuckDB file; the fake probe worker.

Also ``ranksight probe gpu`` as a real child process.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from pathlib import Path
from typing import Any

import duckdb

from ranksight.api.client import query
from ranksight.settings import Settings
from tests.gpuprobe_support import fake_command, idle_roots, probe_settings
from tests.support import agent, aggregator, run_cli_async, settings_env, wait_for


def _db_rows(settings: Settings, sql: str) -> list[tuple[Any, ...]]:
    con = duckdb.connect(str(settings.db_path()), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def _runs(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


async def test_results_stored_live_and_not_rerun_after_agent_restart(
    settings: Settings, tmp_path: Path
) -> None:
    runs = tmp_path / "runs"
    settings.agent.collectors.gpu_probe = probe_settings(
        tmp_path, "--gpus", "2", "--runs-file", str(runs), stagger_s=0, interval_s=0.2
    )
    state_file = settings.state_dir / "gpu_probe" / "test-node-a.json"
    async with aggregator(settings) as agg:
        tracker = agg.state.gpu_probes
        async with agent(settings, only=["gpu_probe"]) as rt:
            await wait_for(lambda: len(tracker.live) == 2)
            await wait_for(state_file.exists)  # checkpointed once the stream acked the records
            assert rt.ctx is not None
            health = rt.ctx.collectors["gpu_probe"].health
            assert (health.state, health.source) == ("ok", "fake 1.0")
        assert json.loads(state_file.read_text())["status"] == "ok"
        assert _runs(runs) == 1
        # A restarted agent knows the result is still valid (TTL 1 h) and does not probe again.
        async with agent(settings, only=["gpu_probe"]) as again:
            assert again.ctx is not None
            collector = again.ctx.collectors["gpu_probe"]
            assert collector.next_due_s() > time.time() + 3000  # type: ignore[attr-defined]
            await asyncio.sleep(1.0)  # five check intervals
        assert _runs(runs) == 1
        live = sorted(tracker.live.values(), key=lambda r: r.index)
        assert [(r.node, r.index, r.name, r.tflops_bf16) for r in live] == [
            ("node-a", 0, "AMD Instinct MI300X", 700.0),
            ("node-a", 1, "AMD Instinct MI300X", 700.0),
        ]
        assert live[0].expires_ns - live[0].recv_ns == 3600 * 10**9
        response = await query(settings, "gpu_probes", {"node": "node-a"})
        assert response.ok, response.error
        assert [(r["index"], r["tflops_fp16"], r["underperforming"]) for r in response.rows] == [
            (0, 707.0, False),
            (1, 707.0, False),
        ]
        assert (await query(settings, "gpu_probes", {"node": "other"})).rows == []
        bad = await query(settings, "gpu_probes", {"gpu": 1})
        # a bad parameter is a bad request (400), as on every endpoint
        assert (bad.ok, bad.error) == (False, "bad request: unknown parameter 'gpu'")
    rows = _db_rows(
        settings, 'SELECT "index", status, backend, mem_bandwidth_bps, ttl FROM gpu_probe ORDER BY 1'
    )
    assert rows == [(0, "ok", "fake 1.0", 4.0e12, 3600.0), (1, "ok", "fake 1.0", 4.0e12, 3600.0)]


async def test_busy_node_is_skipped_and_says_why(settings: Settings, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    cfg = probe_settings(tmp_path, "--runs-file", str(runs), stagger_s=0, interval_s=0.2)
    (cfg.proc_root / "net" / "tcp").write_text(
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
        "   0: 0100007F:6D7C 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1\n"
    )
    settings.agent.collectors.gpu_probe = cfg
    async with aggregator(settings) as agg, agent(settings, only=["gpu_probe"]):
        await wait_for(lambda: agg.stats.records >= 1)
        await asyncio.sleep(1.0)  # five more checks, still busy: nothing runs, nothing more is said
        assert agg.stats.records == 1
    assert _runs(runs) == 0
    rows = _db_rows(settings, 'SELECT "index", status, reason FROM gpu_probe')
    assert rows == [(-1, "skipped", "node busy: RAS port 28028 is listening (an RCCL/NCCL job runs here)")]


def _cli_env(settings: Settings, tmp_path: Path, *fake_args: str) -> dict[str, str]:
    roots = idle_roots(tmp_path)
    env = settings_env(settings)
    prefix = "RANKSIGHT_AGENT__COLLECTORS__GPU_PROBE__"
    env[prefix + "WORKER_COMMAND"] = json.dumps(fake_command(*fake_args))
    env[prefix + "PROC_ROOT"] = str(roots["proc_root"])
    env[prefix + "SYS_ROOT"] = str(roots["sys_root"])
    return env


async def test_probe_gpu_cli_json_shape(settings: Settings, tmp_path: Path) -> None:
    proc = await run_cli_async("probe", "gpu", "--json", env=_cli_env(settings, tmp_path, "--gpus", "2"))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert list(out) == ["gpus"]
    assert [list(g) for g in out["gpus"]] == [
        ["index", "name", "tflops_bf16", "tflops_fp16", "mem_bandwidth_bps", "duration_s"]
    ] * 2
    assert out["gpus"][1]["index"] == 1 and out["gpus"][1]["mem_bandwidth_bps"] == 4.0e12
    table = await run_cli_async("probe", "gpu", env=_cli_env(settings, tmp_path, "--gpus", "1"))
    assert table.returncode == 0
    # headers read as words, their units in the cells (core.cliutil.header)
    assert [h.strip() for h in table.stdout.split("\n")[0].split("  ") if h.strip()] == [
        "INDEX", "NAME", "TFLOPS BF16", "TFLOPS FP16", "MEM BANDWIDTH", "DURATION"
    ]  # fmt: skip


async def test_probe_gpu_cli_unavailable(settings: Settings, tmp_path: Path) -> None:
    env = _cli_env(settings, tmp_path, "--mode", "unavailable")
    proc = await run_cli_async("probe", "gpu", env=env)
    assert (proc.returncode, proc.stdout) == (1, "")
    assert proc.stderr.strip() == "unavailable: PyTorch is not installed (fake)"
    proc = await run_cli_async("probe", "gpu", "--json", env=env)
    assert proc.returncode == 1
    assert json.loads(proc.stdout) == {"gpus": [], "unavailable": "PyTorch is not installed (fake)"}


async def test_probe_gpu_cli_refuses_a_busy_node_unless_forced(settings: Settings, tmp_path: Path) -> None:
    env = _cli_env(settings, tmp_path, "--gpus", "1")
    kfd_user = tmp_path / "proc" / "4242"
    (kfd_user / "fd").mkdir(parents=True)
    (kfd_user / "comm").write_text("python\n")
    (kfd_user / "fd" / "3").symlink_to("/dev/kfd")
    proc = await run_cli_async("probe", "gpu", env=env)
    assert proc.returncode == 1
    assert proc.stderr.strip() == "unavailable: node busy: processes using GPUs: 4242 (python)"
    forced = await run_cli_async("probe", "gpu", "--json", "--force", env=env)
    assert forced.returncode == 0 and len(json.loads(forced.stdout)["gpus"]) == 1


async def test_slow_gpu_among_peers_raises_gpu_underperforming(settings: Settings, tmp_path: Path) -> None:
    nodes = {"node-a": "700", "node-b": "700", "node-c": "450", "node-d": "700"}
    async with aggregator(settings) as agg, contextlib.AsyncExitStack() as stack:
        for node, tflops in nodes.items():
            own = settings.model_copy(deep=True)
            own.agent.node = node
            own.agent.collectors.gpu_probe = probe_settings(
                tmp_path / node, "--gpus", "2", "--tflops", tflops, stagger_s=0
            )
            await stack.enter_async_context(agent(own, only=["gpu_probe"]))
        alert = await wait_for(
            lambda: next((a for a in agg.engine.active.values() if a.rule == "gpu_underperforming"), None)
        )
        await asyncio.sleep(0.3)  # a few more ticks: the slow node's second GPU may arrive in a later batch
        fired = sorted((a.node, a.evidence["gpu"]) for a in agg.engine.active.values())
    assert fired == [("node-c", 0), ("node-c", 1)]
    metrics = {f["metric"] for f in alert.evidence["findings"]}
    assert metrics == {"tflops_bf16", "tflops_fp16"}  # bandwidth is normal
    rows = _db_rows(settings, "SELECT DISTINCT node, state FROM alerts WHERE rule = 'gpu_underperforming'")
    assert rows == [("node-c", "firing")]
