"""Alert transitions in history: appended as they happen, the firing ones read back at a start, evidence completed
after an alert fired merged into its stored transitions."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from ranksight.aggregator.tables import OnWriter
from ranksight.schemas.alerts import Alert

ALERT_SCHEMA = pa.schema(
    [
        (c, pa.string())
        for c in ("fingerprint", "rule", "severity", "state", "cluster", "node", "job", "comm", "entity")
    ]
    + [
        ("rank", pa.int64()),
        ("summary", pa.string()),
        ("started_at", pa.string()),
        ("resolved_at", pa.string()),
        ("updated_at", pa.string()),
        ("evidence", pa.string()),
        ("silenced_by", pa.string()),
    ]
)


class AlertTable(OnWriter):
    def add_alert_evidence(self, fingerprint: str, started_at: str, evidence: dict[str, Any]) -> None:
        """Merge keys into the evidence of every stored transition of one alert (its firing and, if it resolved
        meanwhile, its resolution): evidence completed after the alert fired, not a transition of its own."""
        self.con.execute(
            "UPDATE alerts SET evidence = json_merge_patch(coalesce(evidence, '{}'), ?::JSON) "
            "WHERE fingerprint = ? AND started_at = ?::TIMESTAMP",
            [json.dumps(evidence, default=str), fingerprint, started_at],
        )

    def write_alerts(self, alerts: list[Alert]) -> None:
        """Append alert transitions (one columnar insert: a mass resolve can be thousands of rows)."""
        if not alerts:
            return
        columns = ("fingerprint", "rule", "severity", "state", "cluster", "node", "job", "comm", "entity", "rank",
                   "summary", "started_at", "resolved_at", "updated_at")  # fmt: skip
        data: dict[str, list[Any]] = {c: [getattr(a, c) for a in alerts] for c in columns}
        data["evidence"] = [json.dumps(a.evidence, default=str) for a in alerts]
        data["silenced_by"] = [json.dumps(a.silenced_by) if a.silenced_by else None for a in alerts]
        batch = pa.table(data, schema=ALERT_SCHEMA)
        self.con.register("alert_batch", batch)
        try:
            self.con.execute(
                "INSERT INTO alerts BY NAME SELECT * REPLACE (started_at::TIMESTAMP AS started_at, "
                "resolved_at::TIMESTAMP AS resolved_at, updated_at::TIMESTAMP AS updated_at) FROM alert_batch"
            )
        finally:
            self.con.unregister("alert_batch")

    def active_alerts(self) -> list[Alert]:
        cur = self.con.execute(
            "SELECT fingerprint, rule, severity, state, cluster, node, job, comm, rank, summary, evidence, "
            "strftime(started_at, '%Y-%m-%dT%H:%M:%S.%fZ'), strftime(updated_at, '%Y-%m-%dT%H:%M:%S.%fZ'), entity "
            "FROM alerts QUALIFY row_number() OVER (PARTITION BY fingerprint ORDER BY updated_at DESC, "
            "state = 'resolved' DESC) = 1"
        )
        out = []
        for r in cur.fetchall():
            if r[3] != "firing":
                continue
            out.append(Alert(fingerprint=r[0], rule=r[1], severity=r[2], state=r[3], cluster=r[4], node=r[5],
                             job=r[6], comm=r[7], rank=r[8], summary=r[9], evidence=json.loads(r[10] or "{}"),
                             started_at=r[11], updated_at=r[12], entity=r[13]))  # fmt: skip
        return out
