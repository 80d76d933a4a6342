"""The floors of the package tree: nothing imports from a floor above its own, and packages import each other in one
direction only.

A module's floor comes from its path: the first name under ``src/ranksight/`` (:data:`FLOORS`). From the bottom:

    errors, client       the exception tree, and the training-side client (imported by training jobs): each imports
                         nothing else of ranksight
    schemas              the wire contract: records, envelope, subjects, codec
    core                 shared ground: settings, NATS connection, asyncio helpers, redaction, command-line helpers
    api | formats        the query API as callers see it: endpoint declarations, client, query commands; and the
                         parsers of the formats node-side tools write (bytes in, wire records out); siblings
    agent | aggregator   the two processes; siblings: neither imports the other
    deploy               the SSH rollout
    settings             the root of the settings: every component's sections (each declared beside its component)
                         composed, and its loader
    simulate             the simulated cluster (a test device for the demo and the tests)
    commands             commands that start or gather several components (up, demo, parse, probe, analyze, the
                         query commands with --db on the history ones)
    cli                  the command dispatcher
    docgen               the docs site's generated pages: it reads every floor, the dispatcher's parsers included

Imports are read statically (:mod:`ast`) from every module, those inside functions and under ``TYPE_CHECKING``
included: a module may import its own top-level package and any floor below it. Cycles are checked among the
children of every package (a subpackage counts as one unit with everything under it): two units that import each
other at run time (``TYPE_CHECKING`` imports are annotations only) with a package among them fail.

:data:`KNOWN_VIOLATIONS` is a ratchet: imports the layout still has and a later change removes. The test fails when
a new violation appears and when a listed one has gone (then strike it from the list).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import cache
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
ROOT = "ranksight"

FLOORS: dict[str, int] = {
    "errors": 0,
    "client": 0,
    "schemas": 1,
    "core": 2,
    "api": 3,
    "formats": 3,
    "agent": 4,
    "aggregator": 4,
    "deploy": 5,
    "settings": 6,
    "simulate": 7,
    "commands": 8,
    "cli": 9,
    "docgen": 10,
}

# (importer, imported) -> the rule it breaks ("upward": a higher floor or a sibling; "cycle"); the comment above
# each says why it is still there and what removes it.
KNOWN_VIOLATIONS: dict[tuple[str, str], str] = {}


@dataclass(frozen=True)
class Import:
    importer: str
    imported: str
    line: int
    runtime: bool  # False: under ``if TYPE_CHECKING:``


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted((SRC / ROOT).rglob("*.py"))}


def is_package(name: str) -> bool:
    return modules()[name].name == "__init__.py"


def nearest_module(name: str) -> str:
    """``ranksight.a.b.Thing`` -> ``ranksight.a.b``: the longest prefix that is a module."""
    while name not in modules() and "." in name:
        name = name.rpartition(".")[0]
    return name


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    hidden: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            hidden.update(id(inner) for stmt in node.body for inner in ast.walk(stmt))
    return hidden


@cache
def imports() -> tuple[Import, ...]:
    found = []
    for name, path in modules().items():
        tree = ast.parse(path.read_text(), str(path))
        package = name if is_package(name) else name.rpartition(".")[0]
        hidden = _type_checking_nodes(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*parts, *([base] if base else [])])
                targets = [f"{base}.{alias.name}" for alias in node.names]
            else:
                continue
            for target in targets:
                if target.split(".")[0] == ROOT:
                    found.append(Import(name, nearest_module(target), node.lineno, id(node) not in hidden))
    return tuple(found)


def top(name: str) -> str:
    """The first name under ``ranksight/``: what decides the floor."""
    return name.split(".")[1] if "." in name else ROOT


def upward(imp: Import) -> bool:
    """An import of a higher floor, of a sibling on the same floor, or anything of ranksight from the ground."""
    here, there = top(imp.importer), top(imp.imported)
    if here == there:
        return False
    if here == ROOT or FLOORS[here] == 0:  # the package's own __init__, errors, client: nothing of ranksight
        return True
    return there != ROOT and FLOORS[there] >= FLOORS[here]


def unit(name: str, package: str) -> str | None:
    """The child of ``package`` that holds module ``name`` (a module or a subpackage), None when outside it."""
    if not name.startswith(package + "."):
        return None
    return f"{package}.{name[len(package) + 1 :].split('.')[0]}"


def cycles(edges: set[tuple[str, str]]) -> list[list[str]]:
    """Every set of sibling units (under any package) that import each other, with a package among them."""
    found = []
    for package in (name for name in modules() if is_package(name)):
        graph: dict[str, set[str]] = {}
        for importer, imported in edges:
            a, b = unit(importer, package), unit(imported, package)
            if a and b and a != b:
                graph.setdefault(a, set()).add(b)
        found += [sorted(c) for c in strongly_connected(graph) if len(c) > 1 and any(map(is_package, c))]
    return found


def strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's algorithm, iterative."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph.get(succ, ())))))
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    components.append(component)
    return components


def test_every_top_level_name_has_a_floor() -> None:
    names = {top(name) for name in modules()} - {ROOT}
    assert names - FLOORS.keys() == set(), "declare the new package's floor in FLOORS (and in this docstring)"
    assert FLOORS.keys() - names == set(), "a floor of FLOORS has no package any more"


def test_nothing_imports_from_a_higher_floor() -> None:
    assert len(modules()) > 150
    found = {
        (
            imp.importer,
            imp.imported,
        ): f"{modules()[imp.importer].relative_to(SRC)}:{imp.line} imports {imp.imported}"
        for imp in imports()
        if upward(imp)
    }
    known = {edge for edge, kind in KNOWN_VIOLATIONS.items() if kind == "upward"}
    assert sorted(found[edge] for edge in found.keys() - known) == [], "an import from a higher floor"
    assert sorted(known - found.keys()) == [], "gone: strike it from KNOWN_VIOLATIONS"


def test_no_import_cycles_between_packages() -> None:
    edges = {(imp.importer, imp.imported) for imp in imports() if imp.runtime}
    known = {edge for edge, kind in KNOWN_VIOLATIONS.items() if kind == "cycle"}
    assert sorted(known - edges) == [], "gone: strike it from KNOWN_VIOLATIONS"
    assert cycles(edges - KNOWN_VIOLATIONS.keys()) == []  # an upward import listed there may close one too
    assert not known or cycles(edges) != [], (
        "the listed imports no longer close a cycle: strike them from KNOWN_VIOLATIONS"
    )


def test_the_checks_see_violations() -> None:
    """The checker itself, on imports that break each rule."""
    assert upward(Import("ranksight.aggregator.store", "ranksight.agent.runtime", 1, True))  # sibling
    assert upward(Import("ranksight.core.config", "ranksight.aggregator.store", 1, True))  # higher
    assert upward(Import("ranksight.client", "ranksight.errors", 1, True))  # the client imports nothing
    assert not upward(Import("ranksight.commands.up", "ranksight.agent.runtime", 1, True))
    assert not upward(Import("ranksight.agent.runtime", "ranksight.client", 1, True))
    loop = {("ranksight.aggregator.state.jobs", "ranksight.aggregator.api.queries"),
            ("ranksight.aggregator.api.queries", "ranksight.aggregator.state")}  # fmt: skip
    assert cycles(loop) == [["ranksight.aggregator.api", "ranksight.aggregator.state"]]
    within = {
        ("ranksight.core.config", "ranksight.core.redact"),
        ("ranksight.core.redact", "ranksight.core.config"),
    }
    assert cycles(within) == []  # two modules of one package: not a cycle between packages
