"""One health vocabulary (``ok``, ``warning``, ``critical``) for every face: a node's ``state`` says what it is doing,
its ``health`` how well, and the two are never mixed; a GPU's own alerts mark that GPU, not its neighbours."""

from __future__ import annotations

import pytest

from ranksight.aggregator.api.health import (
    HEALTH_WORDS,
    alert_gpu,
    alert_severity,
    gpu_alert_severity,
    job_health,
    node_health,
)
from ranksight.schemas.alerts import Alert


@pytest.mark.parametrize(
    ("state", "drained", "alerts", "gpus", "expected"),
    [
        ("alive", False, "ok", (), ("alive", "ok")),
        ("alive", False, "warning", ("ok",), ("alive", "warning")),
        ("alive", False, "ok", ("ok", "critical"), ("alive", "critical")),  # a vanished GPU
        ("stale", False, "ok", (), ("stale", "warning")),
        ("stale", False, "critical", (), ("stale", "critical")),
        ("gone", False, "ok", (), ("gone", "critical")),
        ("gone", True, "critical", ("critical",), ("drained", "ok")),  # expected to be silent: nothing to see
    ],
)
def test_state_and_health_are_separate_words(
    state: str, drained: bool, alerts: str, gpus: tuple[str, ...], expected: tuple[str, str]
) -> None:
    found = node_health(state, drained, alerts, gpus)  # type: ignore[arg-type]
    assert found == expected and found[1] in HEALTH_WORDS


def test_a_job_s_ras_words_map_into_the_vocabulary() -> None:
    assert [job_health(w) for w in ("ok", "warning", "degraded", "failed", None)] == [
        "ok", "warning", "warning", "critical", None]  # fmt: skip


def _alert(severity: str, evidence: dict[str, object], node: str = "n1") -> Alert:
    return Alert(rule="r", severity=severity, fingerprint=f"{severity}{evidence}", state="firing", cluster="c",  # type: ignore[arg-type]
                 node=node, summary="s", evidence=evidence, started_at="t", updated_at="t")  # fmt: skip


def test_an_alert_about_one_gpu_marks_that_gpu_and_not_the_whole_node() -> None:
    straggler = _alert("critical", {"gpu": 2, "rank": 2})
    nic = _alert("warning", {"nic": "mlx5_0"})
    missing = _alert("warning", {"gpus": [5]}, node="n2")
    assert [alert_gpu(a) for a in (straggler, nic, missing)] == [2, None, 5]
    alerts = [straggler, nic, missing]
    assert gpu_alert_severity(alerts) == {("c", "n1", 2): "critical", ("c", "n2", 5): "warning"}
    assert alert_severity(alerts) == {("c", "n1"): "critical", ("c", "n2"): "warning"}
    assert alert_severity(alerts, node_wide=True) == {("c", "n1"): "warning"}
