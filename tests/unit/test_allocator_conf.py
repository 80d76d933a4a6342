"""DuckDB's jemalloc returns freed pages at once in the aggregator's processes, unless an operator configured it: the
setting is in the environment by the time DuckDB loads (it reads it then)."""

from __future__ import annotations

import os
import subprocess
import sys

from ranksight.aggregator import ALLOCATOR_CONF, ALLOCATOR_CONF_ENV

# the allocator setting as DuckDB would find it when it is first imported, by way of the aggregator's store
PROBE = f"""
import importlib.abc, os, sys
seen = []
class AtDuckdbImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "duckdb" and not seen:
            seen.append(os.environ.get({ALLOCATOR_CONF_ENV!r}, "unset"))
sys.meta_path.insert(0, AtDuckdbImport())
import ranksight.aggregator.store
print(seen[0])
"""


def _at_duckdb_import(env: dict[str, str]) -> str:
    run = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True)
    return run.stdout.strip()


def test_duckdb_loads_with_freed_pages_returned_at_once() -> None:
    assert (
        _at_duckdb_import({k: v for k, v in os.environ.items() if k != ALLOCATOR_CONF_ENV}) == ALLOCATOR_CONF
    )


def test_an_operators_allocator_conf_wins() -> None:
    assert (
        _at_duckdb_import({**os.environ, ALLOCATOR_CONF_ENV: "dirty_decay_ms:5000"}) == "dirty_decay_ms:5000"
    )
