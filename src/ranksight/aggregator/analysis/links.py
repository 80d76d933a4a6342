"""``link_degraded``: a link whose bandwidth fell well below its own history or below the median of comparable links.

Comparable links: the other fresh, fully measured links of the same cluster and transport, measured within
``comparable_window_s`` of the link. Each direction (upload =
src -> dst, download = dst -> src) is judged on its own; a link needs ``min_history`` earlier measurements before it is
compared with itself, and at least two other links before it is compared with its peers. A link is degraded only when
its last ``degraded_confirm`` measurements are all low (a stable window: one probe slowed by CPU load raises nothing).

A measurement during which either end's probe loop was stalled (busy, or starved of CPU) more than ``max_stall_share``
of the time measured the host, not the link: it is never judged low (a slow link stalls nothing: the loop waits, idle,
for data). As a baseline it still counts: the link carried at least that much.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterator

from ranksight.aggregator.alerts import Condition, RuleDoc
from ranksight.aggregator.component_settings import ProbePlannerSettings
from ranksight.aggregator.state import LiveState
from ranksight.aggregator.state.links import Link, stall_share
from ranksight.aggregator.timefmt import iso

DIRECTIONS = ("upload_bps", "download_bps")


class LinkDegradedRule:
    name = "link_degraded"
    for_s, clear_s = 0.0, 900.0
    doc = RuleDoc(
        "warning",
        "the last `degraded_confirm` (2) measurements that timed the link (neither end's probe loop stalled "
        "over `max_stall_share`, 0.3) all below `degraded_ratio` of the link's history or of comparable links"
        " (measured within `comparable_window_s`, 120 s: a load spike slows the baseline too)",
        "`aggregator.probes.degraded_ratio`, `degraded_confirm`, `comparable_window_s`, `min_history`, "
        "`max_stall_share`",
    )

    def __init__(self, settings: ProbePlannerSettings | None = None) -> None:
        settings = settings or ProbePlannerSettings.model_validate({})
        self.ratio = settings.degraded_ratio
        self.min_history = settings.min_history
        self.confirm = settings.degraded_confirm
        self.peer_window_ns = int(settings.comparable_window_s * 1e9)
        self.max_stall = settings.max_stall_share

    def evaluate(self, state: LiveState, now_ns: int) -> Iterator[Condition]:
        measured = [link for link in state.links.links.values() if link.fresh and _full(link)]
        for link in measured:
            if stall_share(link.record) > self.max_stall:
                continue  # it timed the host: no new word on the link
            # Comparable: measured about when this link was, so that a CPU load spike slowing every probe of a round
            # slows the baseline too.
            peers = [
                p
                for p in measured
                if p is not link
                and (p.cluster, p.transport) == (link.cluster, link.transport)
                and abs(p.measured_ns - link.measured_ns) <= self.peer_window_ns
            ]
            findings = {}
            history = list(link.history)
            # the last degraded_confirm measurements that timed the link (fewer while it has fewer) are judged;
            # everything before the first of them is its own baseline
            judged = [i for i, h in enumerate(history) if h.stall_share <= self.max_stall][-self.confirm :]
            for i, direction in enumerate(DIRECTIONS):
                if getattr(link.record, direction) is None or not judged:
                    continue
                recent: list[float] = [v for j in judged if (v := history[j][i]) is not None]
                own: list[float] = [v for h in history[: judged[0]] if (v := h[i]) is not None]
                others: list[float] = [v for p in peers if (v := getattr(p.record, direction)) is not None]
                if not recent:
                    continue
                value = max(
                    recent
                )  # every recent measurement must be low: one slow probe under load is noise
                baselines: dict[str, float] = {}
                if len(own) >= self.min_history:
                    baselines["own_history_median_bps"] = statistics.median(own)
                if len(others) >= 2:
                    baselines["comparable_median_bps"] = statistics.median(others)
                below = {k: v for k, v in baselines.items() if value < self.ratio * v}
                if below:
                    findings[direction] = {"value_bps": value, "measurements": len(recent), **below}
            if findings:
                worst = min(findings.items(), key=lambda kv: kv[1]["value_bps"])
                yield Condition(
                    rule=self.name,
                    severity="warning",
                    cluster=link.cluster,
                    node=link.src,
                    key=f"{link.src}->{link.dst}/{link.transport}/{link.dst_addr}",
                    entity=f"link {link.src}->{link.dst}",
                    summary=(f"link {link.src} -> {link.dst} ({link.dst_addr}) {worst[0].removesuffix('_bps')} "
                             f"{worst[1]['value_bps'] / 1e6:.1f} Mbit/s, below {self.ratio:.0%} of its baseline"),
                    evidence={"dst": link.dst, "dst_addr": link.dst_addr, "measured": iso(link.measured_ns),
                              "stall_share": stall_share(link.record), **findings},
                )  # fmt: skip


def _full(link: Link) -> bool:
    return link.record.mode == "full" and link.record.error is None
