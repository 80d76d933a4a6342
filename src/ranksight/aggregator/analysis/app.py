"""Job-side rules over the ranks :class:`aggregator.state.app.AppTracker` keeps (``app`` records).

``rank_heartbeat_overdue`` (no heartbeat within the initial timeout after ``start``, or within the timeout after the
last one) and ``rank_section_overdue`` (a section open longer than its timeout); both resolve when the rank recovers
(a heartbeat, the section closes) or ends (``end``, sent at a normal exit, forgets the rank: a job that ends normally
raises nothing).
"""

from __future__ import annotations

from collections.abc import Iterator

from ranksight.aggregator.alerts import Condition, RuleDoc
from ranksight.aggregator.state import LiveState
from ranksight.aggregator.state.app import RankState
from ranksight.aggregator.timefmt import NS, iso


def _where(st: RankState) -> dict[str, object]:
    return {"cluster": st.cluster, "node": st.node, "job": st.job, "rank": st.rank}


class RankHeartbeatOverdueRule:
    name = "rank_heartbeat_overdue"
    for_s, clear_s = 0.0, 30.0
    doc = RuleDoc("critical", "a rank's heartbeat is overdue", "see Job-side signals")

    def evaluate(self, state: LiveState, now_ns: int) -> Iterator[Condition]:
        for st in state.app.ranks.values():
            deadline = st.heartbeat_deadline()
            if deadline is None or now_ns <= deadline.at_ns:
                continue
            first, timeout = deadline.first, deadline.timeout_s
            silent_s = (now_ns - deadline.since_ns) / NS
            what = "no first heartbeat" if first else "no heartbeat"
            yield Condition(
                rule=self.name, severity="critical", summary=f"{st.label} on {st.node}: {what} for "
                f"{silent_s:.0f}s (timeout {timeout:g}s)",
                key="" if st.rank is not None else f"pid {st.pid}",
                evidence={"last_heartbeat": iso(st.last_heartbeat_ns), "announced": iso(st.announced_ns),
                          "timeout_s": timeout, "initial": first, "step": st.step, "pid": st.pid},
                **_where(st),  # type: ignore[arg-type]
            )  # fmt: skip


class RankSectionOverdueRule:
    name = "rank_section_overdue"
    for_s, clear_s = 0.0, 10.0
    doc = RuleDoc("warning", "a section open past its timeout", "see Job-side signals")

    def evaluate(self, state: LiveState, now_ns: int) -> Iterator[Condition]:
        for st in state.app.ranks.values():
            for sec in st.sections.values():
                open_s = (now_ns - sec.opened_ns) / NS
                if open_s <= sec.timeout_s:
                    continue
                yield Condition(
                    rule=self.name, severity="warning", summary=f"{st.label} on {st.node}: section "
                    f"{sec.name!r} open for {open_s:.0f}s (timeout {sec.timeout_s:g}s)",
                    key=f"{'' if st.rank is not None else f'pid {st.pid} '}section {sec.name}#{sec.section_id}",
                    evidence={"section": sec.name, "opened": iso(sec.opened_ns), "open_s": round(open_s, 3),
                              "timeout_s": sec.timeout_s, "pid": st.pid, "step": st.step},
                    **_where(st),  # type: ignore[arg-type]
                )  # fmt: skip
