"""Docs are tested: every command, query endpoint, event kind, alert rule and top-level setting section appears in the
README."""

from __future__ import annotations

import argparse

from ranksight.aggregator.api.endpoints import ENDPOINTS
from ranksight.cli import build_parser
from ranksight.core.config import RULE_TIMINGS, Settings
from ranksight.schemas.records import RECORD_MODELS
from tests.conftest import REPO

README = (REPO / "README.md").read_text()


def _commands() -> list[str]:
    def sub(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
        found = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        return dict(found[0].choices) if found else {}

    out = []
    for name, parser in sub(build_parser()).items():
        out += [f"{name} {child}" for child in sub(parser)] or [name]
    return out


def test_every_command_is_documented() -> None:
    missing = [c for c in _commands() if f"ranksight {c}" not in README]
    assert not missing, f"commands missing from README.md: {missing}"


def test_every_endpoint_and_event_kind_is_documented() -> None:
    assert not [e for e in ENDPOINTS if f"`{e}`" not in README]
    assert not [k for k in RECORD_MODELS if f"`{k}`" not in README]


def test_every_alert_rule_is_documented_with_its_hold_down() -> None:
    """The Alerts table names every rule with its default ``for_s / clear_s``."""
    alerts = README[README.index("## Alerts") :]
    for rule, (for_s, clear_s) in RULE_TIMINGS.items():
        row = next(
            (line for line in alerts.splitlines() if line.startswith("|") and f"`{rule}`" in line), None
        )
        assert row is not None, f"rule {rule} missing from README's Alerts table"
        assert f"| {for_s:g} / {clear_s:g} |" in row, f"{rule}: README says {row!r}"


def test_every_setting_section_is_documented() -> None:
    sections = [name for name, f in Settings.model_fields.items() if hasattr(f.annotation, "model_fields")]
    assert not [s for s in sections if f"[{s}" not in README]
