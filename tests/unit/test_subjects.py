from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from schemas.subjects import SubjectError, Subjects, sanitize_token


def test_event_subject_round_trip() -> None:
    s = Subjects()
    subject = s.event("prod", "gpu-node-01.cluster.local", "ras_event")
    assert subject == "ranksight.v1.ev.prod.gpu-node-01_cluster_local.ras_event"
    parsed = s.parse_event(subject)
    assert (parsed.cluster, parsed.node, parsed.kind) == ("prod", "gpu-node-01_cluster_local", "ras_event")


def test_alert_agent_api_subjects_and_custom_prefix() -> None:
    s = Subjects("acme.rs.v1")
    assert s.alert("c", "critical", "rank_missing") == "acme.rs.v1.alert.c.critical.rank_missing"
    assert s.parse_alert("acme.rs.v1.alert.c.critical.rank_missing").rule == "rank_missing"
    assert s.api("status") == "acme.rs.v1.api.status"
    assert s.agent("c", "n*1", "probe") == "acme.rs.v1.agent.c.n_1.probe"
    assert s.events_filter() == "acme.rs.v1.ev.>"


@pytest.mark.parametrize("bad", ["ranksight.v1.ev.a.b", "other.v1.ev.a.b.c", "ranksight.v1.ev.a.b.c.d"])
def test_parse_rejects_other_shapes(bad: str) -> None:
    with pytest.raises(SubjectError):
        Subjects().parse_event(bad)


def test_invalid_prefix_rejected() -> None:
    with pytest.raises(SubjectError):
        Subjects("bad prefix.>")


@given(st.text())
def test_sanitized_tokens_are_always_one_safe_token(value: str) -> None:
    token = sanitize_token(value)
    assert token and all(c.isascii() and (c.isalnum() or c in "_-") for c in token)
    assert Subjects().parse_event(Subjects().event(value, value, value)).node == token
