"""The collector registry, name -> class, gathered from the modules of this package: adding a collector is its module.

A collector registers itself by declaring its ``name`` (a class attribute of a :class:`Collector`), defined in a module of this
package (``agent/collectors/<name>.py``) or in the ``collector`` module of a subpackage
(``agent/collectors/<name>/collector.py``). Each name is also its config section (``[agent.collectors.<name>]``, a
field of ``CollectorsSettings``) and its health entry; collectors start in the order of those sections.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import pkgutil
from collections.abc import Iterable, Iterator

from ranksight.agent import collectors
from ranksight.agent.collectors.base import Collector
from ranksight.agent.collectors.settings import CollectorsSettings


def collector_modules(package: str, path: Iterable[str]) -> Iterator[str]:
    """The modules of ``package`` that may define collectors: each module, and each subpackage's ``collector``."""
    for info in pkgutil.iter_modules(path):
        if not info.ispkg:
            yield f"{package}.{info.name}"
        elif importlib.util.find_spec(f"{package}.{info.name}.collector") is not None:
            yield f"{package}.{info.name}.collector"


def declared_collectors(modules: Iterable[str]) -> list[type[Collector]]:
    """The collectors defined in ``modules`` (not those they import) that declare their ``name``."""
    found = []
    for name in modules:
        module = importlib.import_module(name)
        found += [
            cls
            for cls in vars(module).values()
            if inspect.isclass(cls)
            and issubclass(cls, Collector)
            and cls.__module__ == name
            and "name" in vars(cls)
        ]
    return found


def _start_order(cls: type[Collector]) -> tuple[int, str]:
    sections = list(CollectorsSettings.model_fields)
    return (sections.index(cls.name) if cls.name in sections else len(sections), cls.name)


COLLECTORS: dict[str, type[Collector]] = {
    cls.name: cls
    for cls in sorted(
        declared_collectors(collector_modules(collectors.__name__, collectors.__path__)),
        key=_start_order,
    )
}
