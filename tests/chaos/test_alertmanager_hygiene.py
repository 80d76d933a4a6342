"""Chaos: what a node sends (a NIC name with markup and escape codes) reaches Alertmanager's labels and annotations, and
so every receiver's template, without control characters or HTML; the evidence stays JSON; a silence on such a label
still matches the label as sent."""

from __future__ import annotations

import json
import re

import pytest

from ranksight.aggregator.alertmanager import alert_body, silence_body
from ranksight.schemas.alerts import Alert, Matcher, Silence

pytestmark = pytest.mark.chaos

HOSTILE = 'eth0<script>alert(1)</script>\x1b]0;T\x07\n<img src=x onerror="y">\u202e'


def test_labels_and_annotations_carry_no_markup_or_control_characters() -> None:
    alert = Alert(rule="nic_down", severity="warning", fingerprint="f1", state="firing", cluster="c", node="n1",
                  entity=HOSTILE, summary=f"port {HOSTILE} is down", evidence={"nic": HOSTILE},
                  started_at="2026-01-01T00:00:00Z", updated_at="2026-01-01T00:00:00Z")  # fmt: skip
    body = alert_body(alert, 0, "http://aggregator:8080")
    values = [*body["labels"].values(), *body["annotations"].values()]
    for value in values:
        assert not re.search("[<>\x00-\x1f\x7f-\x9f\u202a-\u202e]", value), value
    assert body["labels"]["entity"] == (
        'eth0&lt;script&gt;alert(1)&lt;/script&gt;\\x1b]0;T\\x07\\n&lt;img src=x onerror="y"&gt;\\u202e'
    )
    assert (
        "<" not in json.loads(body["annotations"]["evidence"])["nic"]
    )  # still JSON (its escapes are plain text)
    silence = Silence(id="s1", matchers=[Matcher(name="entity", value=HOSTILE)], starts_at="a", ends_at="b",
                      comment="<b>maintenance</b>\n")  # fmt: skip
    sent = silence_body(silence)
    assert (
        sent["matchers"][0]["value"] == body["labels"]["entity"]
    )  # matches the label as Alertmanager has it
    assert "<" not in sent["comment"] and "\n" not in sent["comment"]
