"""When a probe is due: stable per-node stagger, refresh before the TTL lapses, persisted last attempt."""

from __future__ import annotations

import statistics
from pathlib import Path

from ranksight.agent.gpuprobe.schedule import LastAttempt, load_last, next_due_s, save_last, stagger_offset_s


def test_stagger_is_stable_per_node_and_spread_across_nodes() -> None:
    offsets = [stagger_offset_s("prod", f"node-{i:04d}", 600) for i in range(1000)]
    assert offsets[7] == stagger_offset_s("prod", "node-0007", 600)
    assert all(0 <= o < 600 for o in offsets)
    # Spread: every minute of the window gets some nodes, none gets a crowd.
    per_minute = [sum(1 for o in offsets if m * 60 <= o < (m + 1) * 60) for m in range(10)]
    assert min(per_minute) > 60 and max(per_minute) < 140
    assert abs(statistics.mean(offsets) - 300) < 30
    assert stagger_offset_s("prod", "node-0001", 0) == 0


def test_new_node_waits_its_offset_then_refreshes_before_ttl() -> None:
    assert next_due_s(None, started_s=1000, offset_s=42, ttl_s=3600) == 1042
    last = LastAttempt(at_s=5000, status="ok")
    assert next_due_s(last, started_s=1000, offset_s=42, ttl_s=3600) == 5000 + 0.9 * 3600


def test_last_attempt_survives_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "gpu_probe" / "test-node-a.json"
    assert load_last(path) is None
    save_last(path, LastAttempt(123.5, "ok"))
    assert load_last(path) == LastAttempt(123.5, "ok")
    assert not path.with_suffix(".tmp").exists()


def test_damaged_state_file_means_no_history(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    for text in ("{", '{"at_s": "x", "status": "ok"}', '{"status": "ok"}', "[]"):
        path.write_text(text)
        assert load_last(path) is None
