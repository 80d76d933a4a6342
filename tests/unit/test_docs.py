"""Docs are a tested site: the reference pages generated from the code are current, they name every command, query
endpoint, record kind, alert rule (with its hold-down) and setting section; the hand-written guides describe every
alert rule; every page is in the site's navigation; the README stays a short front page; and the site builds with
``mkdocs build --strict``."""

from __future__ import annotations

import argparse
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ranksight import docgen as docs
from ranksight.aggregator.rulebook import rule_timings
from ranksight.api.endpoints import SPECS
from ranksight.cli import build_parser
from ranksight.schemas.records import RECORD_KINDS
from ranksight.settings import Settings
from tests.conftest import REPO

DOCS = REPO / "docs"


def page(path: str) -> str:
    return (DOCS / path).read_text()


def _commands() -> list[str]:
    def sub(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
        found = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        return dict(found[0].choices) if found else {}

    out = []
    for name, parser in sub(build_parser()).items():
        out += [f"{name} {child}" for child in sub(parser)] or [name]
    return out


def test_the_generated_pages_are_current() -> None:
    """What CI's ``make docs`` runs: a fresh interpreter, so no state another test left behind changes the pages."""
    check = subprocess.run([sys.executable, "-m", "ranksight.docgen", "--check", "--repo", str(REPO)], cwd=REPO, capture_output=True,
                           text=True, timeout=300)  # fmt: skip
    assert check.returncode == 0, check.stderr


def test_the_generated_pages_are_the_same_on_every_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing of the machine that renders them: its home directory, its host name."""
    here = docs.pages(REPO)
    assert f"{Path.home()}/" not in "".join(here.values())
    monkeypatch.setattr(socket, "gethostname", lambda: "another-host")
    assert docs.pages(REPO) == here


def test_the_references_name_every_command_endpoint_kind_and_section() -> None:
    cli, api, records, config = (
        page(f"reference/{p}.md") for p in ("cli", "api", "records", "configuration")
    )
    assert [c for c in _commands() if f"## `ranksight {c}`" not in cli] == []
    assert [e for e in SPECS if f"## `{e}`" not in api] == []
    assert [k for k in RECORD_KINDS if f"## `{k}`" not in records] == []
    sections = [name for name, f in Settings.model_fields.items() if hasattr(f.annotation, "model_fields")]
    assert [s for s in sections if f"## `[{s}" not in config] == []


def test_every_alert_rule_is_listed_with_its_hold_down_and_described() -> None:
    """The rule's own declaration is its row (docs/extending.md: a rule is its code, nothing else to edit)."""
    from ranksight.aggregator.actions.planner import ActionBreakerRule, ActionPlanner
    from ranksight.aggregator.actions.settings import ActionSettings
    from ranksight.aggregator.analysis.rules import default_rules

    rules = page("reference/alert-rules.md")
    declared = [*default_rules(), ActionBreakerRule(ActionPlanner(ActionSettings()))]
    assert {r.name for r in declared} == set(rule_timings())
    for rule in declared:
        assert rule.doc.severity and rule.doc.fires_when, f"{rule.name} says nothing to an operator"
        assert f"| `{rule.name}` | {rule.for_s:g} / {rule.clear_s:g} | {rule.doc.severity} |" in rules, (
            rule.name
        )


def _nav_files(entries: list) -> list[str]:
    found = []
    for entry in entries:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        found += _nav_files(value) if isinstance(value, list) else [value]
    return found


def test_every_page_is_in_the_navigation() -> None:
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    listed = _nav_files(config["nav"])
    pages = sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md"))
    assert sorted(listed) == pages


def test_the_readme_is_a_front_page() -> None:
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 300
    assert "make up" in readme and "make test" in readme and "state_dir" in readme
    for target in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (REPO / target).is_file(), target


def test_no_page_is_a_work_log() -> None:
    """Figures belong in benchmarks/results/*.json, rendered into the Benchmarks page; no dated histories."""
    text = (REPO / "README.md").read_text() + "".join(p.read_text() for p in DOCS.rglob("*.md"))
    text = text.replace(page("benchmarks.md"), "")  # its dates are the result files' own
    assert re.findall(r"\b[Ss]ession \d+|\b20\d\d-\d\d-\d\d\b", text) == []


@pytest.mark.skipif(shutil.which("mkdocs", path=str(Path(sys.executable).parent)) is None,
                    reason="mkdocs-material is in the dev extra")  # fmt: skip
def test_the_site_builds_strictly(tmp_path: Path) -> None:
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-3000:]
    assert (tmp_path / "site" / "reference" / "api" / "index.html").is_file()


def test_every_code_block_is_closed() -> None:
    """An unclosed fence swallows the rest of a page (headings, anchors) without a build warning."""
    for path in [REPO / "README.md", *DOCS.rglob("*.md")]:
        fences = [line for line in path.read_text().splitlines() if line.startswith("```")]
        assert len(fences) % 2 == 0, path
