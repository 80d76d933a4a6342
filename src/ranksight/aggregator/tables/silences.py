"""Silences in history: saved as made or expired early, those still in force read back at a start."""

from __future__ import annotations

import json

from ranksight.aggregator.tables import OnWriter
from ranksight.schemas.alerts import Silence


class SilenceTable(OnWriter):
    def save_silence(self, silence: Silence) -> None:
        """Insert or update (an early expiry moves ``ends_at``) one silence."""
        self.con.execute(
            "INSERT OR REPLACE INTO silences VALUES (?, ?, ?::TIMESTAMP, ?::TIMESTAMP, ?, ?, now()::TIMESTAMP)",
            [silence.id, json.dumps([m.model_dump() for m in silence.matchers]), silence.starts_at.rstrip("Z"),
             silence.ends_at.rstrip("Z"), silence.created_by, silence.comment],
        )  # fmt: skip

    def silences(self, since_ns: int) -> list[Silence]:
        """Silences that end after ``since_ns``, oldest first."""
        cur = self.con.execute(
            "SELECT id, matchers, strftime(starts_at, '%Y-%m-%dT%H:%M:%S.%fZ'), "
            "strftime(ends_at, '%Y-%m-%dT%H:%M:%S.%fZ'), created_by, comment FROM silences "
            "WHERE ends_at > make_timestamp(?::BIGINT // 1000) ORDER BY starts_at, id",
            [since_ns],
        )
        return [Silence(id=r[0], matchers=json.loads(r[1]), starts_at=r[2], ends_at=r[3], created_by=r[4],
                        comment=r[5]) for r in cur.fetchall()]  # fmt: skip
