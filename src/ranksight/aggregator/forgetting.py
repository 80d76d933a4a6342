"""What every live-state tracker uses to forget nodes (``Tracker.forget``, driven by ``LiveState.tick``).

Its own module, importing nothing of the aggregator: ``aggregator.state`` imports the trackers' modules.
"""

from __future__ import annotations

from typing import Any, TypeVar

NodeKey = tuple[str, str]  # cluster, node
V = TypeVar("V")


def without_nodes(table: dict[Any, V], nodes: set[NodeKey]) -> dict[Any, V]:
    """``table`` (keyed by tuples that start with cluster and node) without the entries of ``nodes``: a new dict,
    since a Python dict keeps its allocated size after deletions."""
    return {key: value for key, value in table.items() if key[:2] not in nodes}
