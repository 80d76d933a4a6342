"""Writes the msgspec twins of the pydantic models as Python source, so that a process can use them without pydantic.

The pydantic models are the one declaration (of records, envelope, agent commands, settings); the twins are derived
from them. The aggregator decodes every event into the record twins (:mod:`schemas.twins`); the agent process builds
them and reads its settings as twins (:mod:`ranksight.core.settings_twins`) and so never loads pydantic, about 13 MB of its
memory. A twin has the model's fields, in order, with their types, defaults and constraints (``ge``, ``le``, ``gt``,
``lt``, ``min_length``, ``max_length``, ``pattern``), ignores or forbids unknown fields as the model does, carries the
model's ``ClassVar`` values, and inherits the model's plain mixins (behaviour declared once for both forms). Record
twins also bound every ``int`` and ``float``, at any depth, to what the store keeps (:data:`STORED_BOUNDS`: BIGINT,
finite DOUBLE), so a value that passes decoding can always be committed. Records, the envelope and the agent's
commands are frozen (live state shares them); sub-records are not (the RAS parsers build them field by field). Record
twins are not tracked by the cyclic GC (``gc=False``: decoded data cannot form cycles, and millions of live records
would slow every collection).

``python -m ranksight.schemas.generate`` rewrites the files; ``tests/unit/test_structs.py`` fails when one is stale.
"""

from __future__ import annotations

import re
import sys
import types
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types
from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo

from ranksight.schemas.wire import STORED_BOUNDS

ROOT = Path(__file__).resolve().parents[3]

# pydantic's constraint metadata -> the msgspec.Meta keyword (each is also the metadata object's attribute)
_CONSTRAINTS: dict[type, str] = {
    annotated_types.Ge: "ge",
    annotated_types.Gt: "gt",
    annotated_types.Le: "le",
    annotated_types.Lt: "lt",
    annotated_types.MinLen: "min_length",
    annotated_types.MaxLen: "max_length",
}


@dataclass
class Target:
    """One generated module: the twins of ``models`` (and of every model they hold), in dependency order."""

    path: str  # relative to the repository root
    doc: str
    models: list[type[BaseModel]]
    # constraints, and every int and float bounded to what the store keeps (records; settings are validated already)
    validating: bool
    defaults: bool  # False: every field is required (settings twins are only ever made of validated settings)
    # frozen: the twins of these models and of their subclasses (others, sub-records, are built field by field)
    frozen: tuple[type[BaseModel], ...]
    untracked: bool  # gc=False: not tracked by the cyclic GC (decoded data cannot form cycles)
    footer: str = ""  # source appended after the classes (a registry built of them)


def _constraints(metadata: Iterable[Any]) -> dict[str, Any]:
    kwargs: dict[str, Any] = {}
    for item in metadata:
        for kind, keyword in _CONSTRAINTS.items():
            if isinstance(item, kind):
                kwargs[keyword] = getattr(item, keyword)
        pattern = getattr(item, "pattern", None)
        if isinstance(pattern, str):
            kwargs["pattern"] = pattern
    return kwargs


def _tightest(stored: dict[str, Any], model: dict[str, Any]) -> dict[str, Any]:
    """The model's bounds within the stored ones (msgspec takes one ``ge``/``le`` per type, not a stack of them)."""
    merged = {**stored, **model}
    if "gt" in model:
        merged.pop("ge")
    if "lt" in model:
        merged.pop("le")
    if "ge" in model:
        merged["ge"] = max(stored["ge"], model["ge"])
    if "le" in model:
        merged["le"] = min(stored["le"], model["le"])
    return merged


# the stored bounds, named once in a generated module
_STORED_ALIASES = {int: "StoredInt", float: "StoredFloat"}


def _meta(kwargs: dict[str, Any]) -> str:
    return "msgspec.Meta(" + ", ".join(f"{k}={v!r}" for k, v in sorted(kwargs.items())) + ")"


class _Writer:
    """Writes one target's classes, each model once and after the models it holds, noting what they import."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.imports: set[tuple[str, str]] = set()  # (module, name)
        self.lines: list[str] = []
        self.done: set[type[BaseModel]] = set()

    def type_source(self, annotation: Any, constraints: dict[str, Any] | None = None) -> str:
        """Source text of the msgspec type of ``annotation``, with ``constraints`` on it."""
        constraints = dict(constraints or {})
        if get_origin(annotation) is Annotated:
            inner, *extra = get_args(annotation)
            for item in extra:
                constraints.update(_constraints(item.metadata if isinstance(item, FieldInfo) else [item]))
            return self.type_source(inner, constraints)
        if not self.target.validating:
            constraints = {}
        if constraints and get_origin(annotation) in (
            Union,
            types.UnionType,
        ):  # each member bounded, not the union
            return " | ".join(
                "None" if a is type(None) else self.type_source(a, constraints) for a in get_args(annotation)
            )
        if self.target.validating and annotation in STORED_BOUNDS:
            if not constraints:
                return _STORED_ALIASES[annotation]
            bounds = _tightest(STORED_BOUNDS[annotation], constraints)
            return f"Annotated[{annotation.__name__}, {_meta(bounds)}]"
        text = self._plain(annotation)
        return f"Annotated[{text}, {_meta(constraints)}]" if constraints else text

    def _plain(self, annotation: Any) -> str:
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            self.add(annotation)
            return annotation.__name__
        origin, args = get_origin(annotation), get_args(annotation)
        if origin in (Union, types.UnionType):
            return " | ".join(self.type_source(a) for a in args)
        if origin is list:
            return f"list[{self.type_source(args[0])}]"
        if origin is dict:
            return f"dict[{self.type_source(args[0])}, {self.type_source(args[1])}]"
        if origin is Literal:
            self.imports.add(("typing", "Literal"))
            return f"Literal[{', '.join(map(repr, args))}]"
        if annotation is Any:
            return "Any"
        if annotation is type(None):
            return "None"
        if annotation is Path:
            self.imports.add(("pathlib", "Path"))
            return "Path"
        if annotation is SecretStr:
            self.imports.add(("ranksight.core.secret", "Secret"))
            return "Secret"
        if annotation in (str, int, float, bool, bytes):
            return str(annotation.__name__)
        raise TypeError(f"no twin for the annotation {annotation!r}")

    def mixins(self, model: type[BaseModel]) -> list[str]:
        """The model's plain behaviour classes (``__slots__ = ()``, not models), nearest first."""
        names = []
        for base in model.__mro__[1:]:
            if issubclass(base, BaseModel) or base is object or base.__dict__.get("__slots__") != ():
                continue
            if base.__module__ == "typing":
                continue
            self.imports.add((base.__module__, base.__name__))
            names.append(base.__name__)
        return names

    def default_source(self, info: FieldInfo) -> str:
        factory = info.default_factory
        if isinstance(factory, type) and issubclass(factory, BaseModel):
            self.add(factory)
            return f"msgspec.field(default_factory={factory.__name__})"
        if factory in (list, dict):
            return f"msgspec.field(default_factory={factory.__name__})"  # type: ignore[union-attr]
        if factory is not None:
            raise TypeError(f"no twin for the default factory {factory!r}")
        return self.value_source(info.default)

    def value_source(self, value: Any) -> str:
        if isinstance(value, BaseModel):
            model = type(value)
            self.add(model)
            fields = value.model_dump(exclude_defaults=True)
            if not fields:
                return f"msgspec.field(default_factory={model.__name__})"
            return f"msgspec.field(default_factory=lambda: msgspec.convert({fields!r}, {model.__name__}))"
        if isinstance(value, (list, dict)):
            if not value:
                return f"msgspec.field(default_factory={type(value).__name__})"
            return f"msgspec.field(default_factory=lambda: {value!r})"
        if value is None or isinstance(value, (str, int, float, bool)):
            return repr(value)
        raise TypeError(f"no twin for the default {value!r}")

    def add(self, model: type[BaseModel]) -> None:
        target = self.target
        if model in self.done:
            return
        self.done.add(model)
        fields: list[str] = []
        for name, info in model.model_fields.items():
            annotation = self.type_source(info.annotation, _constraints(info.metadata))
            if info.is_required() or not target.defaults:
                fields.append(f"    {name}: {annotation}")
            else:
                fields.append(f"    {name}: {annotation} = {self.default_source(info)}")
        class_vars = []
        for name in sorted(model.__class_vars__):
            self.imports.add(("typing", "ClassVar"))
            value = getattr(model, name)
            class_vars.append(f"    {name}: ClassVar[{type(value).__name__}] = {value!r}")
        bases = [*self.mixins(model), "msgspec.Struct"]
        forbid = model.model_config.get("extra") == "forbid"
        options = "kw_only=True"  # pydantic allows required fields after defaulted ones
        options += ", frozen=True" if issubclass(model, target.frozen) else ""
        options += ", gc=False" if target.untracked else ""
        options += ", forbid_unknown_fields=True" if forbid else ""
        body = [f'    """The twin of :class:`{model.__module__}.{model.__name__}`."""', ""]
        self.lines += [
            "",
            "",
            f"class {model.__name__}({', '.join(bases)}, {options}):",
            *body,
            *class_vars,
            *fields,
        ]


def source(target: Target) -> str:
    writer = _Writer(target)
    for model in target.models:
        writer.add(model)
    body = "\n".join(writer.lines)
    for name in ("Annotated", "Any"):
        if re.search(rf"\b{name}\b", body):
            writer.imports.add(("typing", name))
    modules: dict[str, set[str]] = {}
    for module, name in writer.imports:
        modules.setdefault(module, set()).add(name)

    def block(names: Iterable[str]) -> list[str]:
        return [f"from {m} import {', '.join(sorted(modules[m]))}" for m in sorted(names)]

    head = [f'"""{target.doc}"""', "", "# fmt: off", "from __future__ import annotations", ""]
    head += [*block(m for m in modules if not m.startswith("ranksight")), "", "import msgspec", ""]
    own = block(m for m in modules if m.startswith("ranksight"))
    if own:
        head += [*own, ""]
    if target.validating:
        head += [
            "# what the store can hold (``STORED_BOUNDS``): every int and float of a record is one of these"
        ]
        head += [f"{alias} = Annotated[{kind.__name__}, {_meta(STORED_BOUNDS[kind])}]"
                 for kind, alias in _STORED_ALIASES.items()]  # fmt: skip
        head.append("")
    text = "\n".join(head[:-1] + writer.lines) + "\n"
    if target.footer:
        text += "\n\n" + target.footer
    return text


def targets() -> list[Target]:
    from ranksight.core.config import Settings
    from ranksight.schemas.envelope import CompactRecords, Envelope
    from ranksight.schemas.records import RECORD_KINDS, Record
    from ranksight.schemas.records.inspector import RawRecordsPage, RawRecordsRequest
    from ranksight.schemas.records.probe import ProbeCommand
    from ranksight.schemas.records.ras import RasDiagnostics, RasEvent, RasStatus

    kinds = "\n".join(f"    {name!r}: {kind.model.__name__}," for name, kind in RECORD_KINDS.items())
    records = Target(
        "src/ranksight/schemas/twins.py",
        "Generated by ``python -m ranksight.schemas.generate`` from the pydantic models: do not edit.\n\n"
        "The msgspec twins of the record models, of the envelope and of the agent's commands (see "
        ":mod:`schemas.generate`).\n",
        [
            *(kind.model for kind in RECORD_KINDS.values()),
            RasStatus,
            RasDiagnostics,
            RasEvent,
            Envelope,
            CompactRecords,
            RawRecordsRequest,
            RawRecordsPage,
            ProbeCommand,
        ],
        validating=True,
        defaults=True,
        frozen=(Record, Envelope, CompactRecords, RawRecordsRequest, ProbeCommand),
        untracked=True,
        footer="# what every record twin is\nRecord = msgspec.Struct\n\n# each record kind's twin (``RECORD_KINDS``)\n"
        f"KIND_TWINS: dict[str, type[Any]] = {{\n{kinds}\n}}\n",
    )
    settings = Target(
        "src/ranksight/core/settings_twins.py",
        "Generated by ``python -m ranksight.schemas.generate`` from :class:`ranksight.core.config.Settings`: do not edit.\n\n"
        "Validated settings as msgspec structs, for the agent process (see :mod:`schemas.generate`).\n",
        [Settings],
        validating=False,
        defaults=False,
        frozen=(BaseModel,),
        untracked=False,
    )
    return [records, settings]


def stale() -> list[str]:
    """The generated files that differ from what the models make now."""
    return [t.path for t in targets() if (ROOT / t.path).read_text() != source(t)]


def main() -> int:
    for target in targets():
        (ROOT / target.path).write_text(source(target))
        print(f"wrote {target.path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
