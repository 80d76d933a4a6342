"""docs/actions.md documents every policy key, every guard-rail and action setting, every action kind, every action
command and endpoint, and every Xid class with the catalog's codes."""

from __future__ import annotations

import typing
from pathlib import Path

from pydantic import BaseModel

from ranksight.agent.collectors.settings import XidSettings
from ranksight.aggregator.actions.settings import ActionKind, ActionPolicy, ActionSettings, XidResolution
from ranksight.aggregator.analysis.xid import CATALOG
from ranksight.aggregator.api.endpoints import ENDPOINTS

DOC = (Path(__file__).resolve().parents[2] / "docs" / "actions.md").read_text()


def test_every_key_is_documented() -> None:
    assert not [k for k in ActionPolicy.model_fields if f"`{k}`" not in DOC]
    for name, field in ActionSettings.model_fields.items():
        sub = field.annotation
        if isinstance(sub, type) and issubclass(sub, BaseModel):
            assert not [k for k in sub.model_fields if f"`{name}.{k}`" not in DOC], name
        else:
            assert f"`{name}`" in DOC or name == "policies", name
    assert not [k for k in XidSettings.model_fields if k not in ("enabled", "interval_s") and k not in DOC]


def test_every_action_command_and_class_is_documented() -> None:
    assert not [a for a in typing.get_args(ActionKind) if f"`{a}`" not in DOC]
    assert not [e for e in ENDPOINTS if e.startswith("action") and f"`{e}`" not in DOC]
    assert not [c for c in typing.get_args(XidResolution) if f"| `{c}` |" not in DOC]
    table = DOC[DOC.index("## Xid policy") :]
    for code, cls in CATALOG.items():
        row = next(line for line in table.splitlines() if line.startswith(f"| `{cls}` |"))
        assert f" {code}," in row or f" {code} |" in row, (code, cls)
