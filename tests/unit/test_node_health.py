"""One health vocabulary for nodes: the word (``status``/``nodes`` ``health``) and the level (``severity``; the map's
``health``) never disagree."""

from __future__ import annotations

import pytest

from ranksight.aggregator.api.health import node_health


@pytest.mark.parametrize(
    ("state", "drained", "alerts", "gpus", "expected"),
    [
        ("alive", False, "ok", (), ("alive", "ok")),
        ("alive", False, "warning", ("ok",), ("degraded", "warning")),
        ("alive", False, "ok", ("ok", "critical"), ("degraded", "critical")),  # a vanished GPU
        ("stale", False, "ok", (), ("stale", "warning")),
        ("stale", False, "critical", (), ("stale", "critical")),
        ("gone", False, "ok", (), ("gone", "critical")),
        ("gone", True, "critical", ("critical",), ("drained", "ok")),  # expected to be silent: nothing to see
    ],
)
def test_health_word_and_level_agree(
    state: str, drained: bool, alerts: str, gpus: tuple[str, ...], expected: tuple[str, str]
) -> None:
    assert node_health(state, drained, alerts, gpus) == expected  # type: ignore[arg-type]
