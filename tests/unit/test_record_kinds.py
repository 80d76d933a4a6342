"""The record-kind registry: every name a kind declares resolves, and each kind's table is its model's columns."""

from __future__ import annotations

import importlib
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import msgpack
import msgspec.inspect as mi
import pytest

from ranksight.agent.collectors.registry import COLLECTORS, collector_modules, declared_collectors
from ranksight.agent.collectors.settings import CollectorsSettings
from ranksight.aggregator.columns import kind_columns, table_columns
from ranksight.aggregator.ingest.pipeline import Incoming
from ranksight.aggregator.ingest.settings import IngestSettings
from ranksight.aggregator.state import LiveState
from ranksight.aggregator.store import Store
from ranksight.commands.parse import PARSE_MODULES
from ranksight.schemas import records
from ranksight.schemas.records import RECORD_KINDS, declared_kinds
from ranksight.schemas.subjects import Subjects
from tests.unit.test_ingest_admission import NOW, _store

SUBJECTS = Subjects()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    yield from _store(tmp_path, IngestSettings())


def columns_of(store: Store, table: str) -> dict[str, str]:
    rows = store.con.execute(
        "SELECT column_name, data_type FROM duckdb_columns() WHERE schema_name = 'main' AND table_name = ? "
        "ORDER BY column_index",
        [table],
    ).fetchall()
    return dict(rows)


@pytest.mark.parametrize("kind", sorted(RECORD_KINDS))
def test_each_kind_names_a_collector_a_tracker_and_a_parser_that_exist(kind: str) -> None:
    declared = RECORD_KINDS[kind]
    assert declared.collector in COLLECTORS and declared.collector in CollectorsSettings.model_fields
    if declared.tracker is not None:
        assert kind in getattr(LiveState(), declared.tracker).kinds
    if declared.parse is not None:
        assert declared.parse in PARSE_MODULES
        assert callable(importlib.import_module(declared.parse).register_parse)


def test_every_collector_publishes_a_kind_that_names_it() -> None:
    assert {name: RECORD_KINDS[c.kind].collector for name, c in COLLECTORS.items()} == {
        n: n for n in COLLECTORS
    }


def test_every_collector_has_its_settings_section() -> None:
    """A collector's name is its ``[agent.collectors.<name>]`` section; the sections' order is the start order."""
    assert list(COLLECTORS) == list(CollectorsSettings.model_fields)


def test_each_kind_is_declared_once_beside_its_struct() -> None:
    declared = declared_kinds(records.__name__, records.__path__)
    assert sorted(kind.name for kind in declared) == sorted(RECORD_KINDS)  # no name declared twice
    for kind in declared:
        assert kind.model is getattr(sys.modules[kind.model.__module__], kind.model.__name__)
        assert kind in sys.modules[kind.model.__module__].KINDS


@pytest.fixture
def scratch_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An importable package ``scratch_ext`` under ``tmp_path``: the recipe's new files, without touching the tree."""
    package = tmp_path / "scratch_ext"
    package.mkdir()
    (package / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield package
    for name in [name for name in sys.modules if name.split(".")[0] == "scratch_ext"]:
        del sys.modules[name]


def test_a_new_record_module_is_a_new_kind_with_no_list_to_edit(scratch_package: Path) -> None:
    """docs/extending.md: a kind is its struct module; ``RECORD_KINDS`` gathers every module's ``KINDS``."""
    (scratch_package / "fan.py").write_text(
        textwrap.dedent("""
        from ranksight.schemas.records.base import Record, RecordKind

        class FanRecord(Record, kw_only=True, frozen=True):
            rpm: int

        KINDS = [RecordKind("fan", FanRecord, collector="fan", tracker=None)]
    """)
    )
    (scratch_package / "airflow.py").write_text("AIRFLOW_UNITS = 'cfm'  # a helper module declares no kind\n")
    importlib.invalidate_caches()
    [fan] = declared_kinds("scratch_ext", [str(scratch_package)])
    assert (fan.name, fan.model.__name__, fan.collector) == ("fan", "FanRecord", "fan")


def test_a_new_collector_module_registers_itself(scratch_package: Path) -> None:
    """docs/extending.md: a collector is its module (or a subpackage's ``collector`` module) with a ``name``."""
    source = textwrap.dedent("""
        from ranksight.agent.collectors.base import PolledCollector
        from ranksight.agent.collectors.heartbeat import HeartbeatCollector  # imported: not this module's

        class {cls}(PolledCollector):
            name = "{name}"
            kind = "{name}"
    """)
    (scratch_package / "fan.py").write_text(source.format(cls="FanCollector", name="fan"))
    (scratch_package / "pump").mkdir()
    (scratch_package / "pump" / "__init__.py").write_text("")
    (scratch_package / "pump" / "collector.py").write_text(source.format(cls="PumpCollector", name="pump"))
    (scratch_package / "pump" / "parse.py").write_text(
        "raise AssertionError('only collector modules are read')\n"
    )
    importlib.invalidate_caches()
    found = declared_collectors(collector_modules("scratch_ext", [str(scratch_package)]))
    assert sorted(cls.name for cls in found) == ["fan", "pump"]


def matching_columns(kind: str, have: dict[str, str]) -> dict[str, str]:
    """``have`` with each list or map column that a migration made native (``BIGINT[]``) read as the derived JSON:
    ingest writes either from the same Arrow column."""
    nested = kind_columns(kind).nested_fields
    return {c: "JSON" if c in nested and ("[]" in t or t.startswith("MAP(")) else t for c, t in have.items()}


@pytest.mark.parametrize("kind", sorted(RECORD_KINDS))
def test_the_migrated_table_of_each_kind_has_exactly_its_model_columns(store: Store, kind: str) -> None:
    """Names and types: a field whose type changed, or a column no field has, fails here (migrations vs models)."""
    assert matching_columns(kind, columns_of(store, kind)) == table_columns(kind)


def _nic_envelope() -> bytes:
    record = {"name": "mlx5_0/1", "kind": "rdma", "link_layer": "InfiniBand", "speed_bps": 4e11}
    return msgpack.packb({"type": "ranksight.ev.v1.nic", "cluster": "c", "node": "a", "agent": "a-inc",
                          "seq": 1, "ts": NOW, "ttl": 10.0, "records": [record]})  # fmt: skip


def test_a_field_without_a_column_gets_one_on_open_and_its_rows_are_written(tmp_path: Path) -> None:
    """A database from before ``link_layer`` existed (or a forgotten migration): ingest must not fail on it."""
    path = tmp_path / "old.duckdb"
    store = Store(path, SUBJECTS)
    store.open()
    store.con.execute("ALTER TABLE nic DROP COLUMN link_layer")
    store.con.execute("DROP TABLE gpu_probe")
    store.close_connection()
    store.open()
    try:
        assert matching_columns("nic", columns_of(store, "nic")) == table_columns("nic")
        assert columns_of(store, "gpu_probe") == table_columns("gpu_probe")
        result = store.commit_batch([Incoming(SUBJECTS.event("c", "a", "nic"), _nic_envelope(), NOW)])
        assert result.records == 1 and result.dead_letters == 0
        assert store.con.execute("SELECT name, link_layer FROM nic").fetchall() == [
            ("mlx5_0/1", "InfiniBand")
        ]
    finally:
        store.close_connection()
        store.shutdown()


def _unranged_numbers(info: mi.Type, where: str, seen: frozenset[type] = frozenset()) -> Iterator[str]:
    """Where ``info`` (a field's type) holds an int or a float without both a lower and an upper bound of its own."""
    if isinstance(info, mi.Metadata):
        yield from _unranged_numbers(info.type, where, seen)
    elif isinstance(info, mi.UnionType):
        for member in info.types:
            yield from _unranged_numbers(member, where, seen)
    elif isinstance(info, mi.ListType):
        yield from _unranged_numbers(info.item_type, where, seen)
    elif isinstance(info, mi.DictType):
        yield from _unranged_numbers(info.value_type, where, seen)
    elif isinstance(info, mi.StructType) and info.cls not in seen:
        for field in info.fields:
            yield from _unranged_numbers(field.type, f"{info.cls.__name__}.{field.name}", seen | {info.cls})
    elif isinstance(info, mi.IntType | mi.FloatType):
        if (info.ge is None and info.gt is None) or (info.le is None and info.lt is None):
            yield where


@pytest.mark.parametrize("kind", sorted(RECORD_KINDS))
def test_every_number_a_record_carries_declares_its_range(kind: str) -> None:
    """What later arithmetic makes of a number is bounded only if the number is (``schemas.records.quantities``)."""
    assert list(_unranged_numbers(mi.type_info(RECORD_KINDS[kind].model), kind)) == []
