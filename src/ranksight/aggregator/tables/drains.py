"""Node drains in history: each drain and undrain appended, the nodes drained now read back."""

from __future__ import annotations

from typing import Any

from ranksight.aggregator.tables import OnWriter


class DrainTable(OnWriter):
    def set_drained(self, cluster: str, nodes: list[str], drained: bool, reason: str) -> None:
        self.con.execute(
            "INSERT INTO node_drains SELECT ?, unnest(?::VARCHAR[]), ?, now()::TIMESTAMP, ?",
            [cluster, nodes, drained, reason],
        )

    def drained_nodes(self) -> list[dict[str, Any]]:
        """The nodes drained now: cluster, node, since (ISO), reason."""
        cur = self.con.execute(
            "SELECT cluster, node, strftime(changed_at, '%Y-%m-%dT%H:%M:%S.%fZ'), reason FROM node_drains "
            "QUALIFY row_number() OVER (PARTITION BY cluster, node ORDER BY changed_at DESC) = 1 AND drained "
            "ORDER BY cluster, node"
        )
        return [{"cluster": c, "node": n, "since": at, "reason": r} for c, n, at, r in cur.fetchall()]
