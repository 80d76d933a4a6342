"""Shared parts of ranksight (config, NATS connection, commands); imported first by every ranksight process."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

# nats-py imports these when it loads, for its WebSocket transport (ws:// server URLs): about 12 MB of every process's
# memory, the agent's included. They load at first use instead (the aggregator's HTTP server, a ws:// URL).
_WEBSOCKET_DEPS = ("aiohttp", "multidict")
_TRANSPORT = "nats.aio.transport"


class _OnFirstUse:
    """Stands for a module until an attribute is read: then imports it and answers from it."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        return getattr(importlib.import_module(self._name), attr)


class _DeferWebsocketDeps(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Loads ``nats.aio.transport`` with its WebSocket dependencies swapped for :class:`_OnFirstUse` stand-ins."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != _TRANSPORT:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        self._loader = spec.loader
        spec.loader = self
        return spec

    def exec_module(self, module: ModuleType) -> None:
        deferred = [name for name in _WEBSOCKET_DEPS if name not in sys.modules]
        sys.modules.update(dict.fromkeys(deferred))  # type: ignore[arg-type]  # None: `import name` raises ImportError
        try:
            self._loader.exec_module(module)
        finally:
            for name in deferred:
                del sys.modules[name]
        for name in deferred:
            setattr(module, name, _OnFirstUse(name))


if _TRANSPORT not in sys.modules:
    sys.meta_path.insert(0, _DeferWebsocketDeps())
