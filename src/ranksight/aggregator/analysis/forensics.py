"""``flight_recorder_hang``: a job's hang, named from its ranks' own Flight Recorder and Python stacks.

One condition per finding of the job's latest hang report (:class:`aggregator.state.forensics.JobReport`, made by
:mod:`aggregator.hang_forensics` when a hang alert fired): the rank that never arrived (or called something else), its
node, host, pid and GPU, the process group, op and sequence id, how long its peers have waited, the frame it is in, and
what RAS, Inspector and its own heartbeats say about it. Resolves when every rank of the job heartbeats again after the
dump (the job moved on) or the report ages out (``aggregator.hang_forensics.retain_s``). When the same hang has a
``comm_hang`` or ``collective_hang`` alert (RAS, Inspector), the report goes into that alert's evidence
(``flight_recorder``, :func:`merged_evidence`) instead: one hang, one alert.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ranksight.aggregator.alerts import Condition, RuleDoc
from ranksight.aggregator.state import LiveState
from ranksight.aggregator.state.forensics import JobReport
from ranksight.aggregator.timefmt import iso
from ranksight.core.flightrec import Finding


def _moved_on(state: LiveState, report: JobReport) -> bool:
    ranks = [st for st in state.app.ranks.values() if st.cluster == report.cluster and st.job == report.job]
    return bool(ranks) and all((st.last_heartbeat_ns or 0) > report.collected_ns for st in ranks)


class FlightRecorderHangRule:
    """One alert per rank a report names, unless the report went into the same hang's ``comm_hang`` or
    ``collective_hang`` alert (``JobReport.merged_into``): then that alert is the hang's one alert."""

    name = "flight_recorder_hang"
    # hold-down: fires on a matched dump; resolves when the named ranks heartbeat again
    for_s, clear_s = 0.0, 30.0
    doc = RuleDoc(
        "critical",
        "a hang alert's job dumped: a rank never entered (or called another op than) the collective its peers"
        " wait in, or never posted its side of a send/recv; when the same hang has a `comm_hang` / "
        "`collective_hang` alert, the findings go into that alert's `evidence.flight_recorder` instead (one "
        "hang, one alert)",
        "`aggregator.hang_forensics.*`, see Hangs",
    )

    def evaluate(self, state: LiveState, now_ns: int) -> Iterator[Condition]:
        for report in state.forensics.reports.values():
            if report.merged_into is not None or _moved_on(state, report):
                continue
            for finding, rank, evidence in named_ranks(report):
                yield Condition(
                    rule=self.name, severity="critical", cluster=report.cluster, summary=evidence["summary"],
                    node=report.nodes.get(rank), job=report.job, rank=rank,
                    key=f"{finding.process_group} {finding.seq_kind} {finding.seq} {finding.kind}",
                    evidence=report_evidence(report, {**finding_evidence(finding, {rank}, report.max_named),
                                                      **{k: v for k, v in evidence.items() if k != "summary"}}),
                )  # fmt: skip


def blamed(findings: list[Finding]) -> list[tuple[Finding, int]]:
    """The ranks the findings blame, each once at the first finding that does (a rank held up in another group's
    hung op is not blamed)."""
    first: dict[int, Finding] = {}
    for finding in findings:
        for rank in finding.culprits:
            first.setdefault(rank, finding)
    return [(finding, rank) for rank, finding in first.items()]


def named_ranks(report: JobReport) -> Iterator[tuple[Finding, int, dict[str, Any]]]:
    """Each rank the findings blame (:func:`blamed`, at most ``max_named``), with what the operator needs of it: where
    it runs (host, pid, GPU, node), its process group and that group's RAS communicator, the op, sequence id and wait,
    its frame, what RAS and Inspector say of it, and a one-line summary."""
    for finding, rank in blamed(report.report.findings)[: report.max_named]:
        frame = finding.frames.get(rank, {})
        seen = report.corroboration.get(rank, {})
        yield finding, rank, {
            "rank": rank, "kind": finding.kind, "process_group": finding.process_group,
            "ras_comm": report.ras_comms.get(finding.process_group),
            "collective": finding.collective, "seq": finding.seq, "seq_kind": finding.seq_kind,
            "waiting_s": finding.as_dict()["waiting_s"], "node": report.nodes.get(rank),
            "host": frame.get("host") or seen.get("host"), "pid": frame.get("pid") or seen.get("pid"),
            "gpu": frame.get("gpu") if frame.get("gpu") is not None else seen.get("gpu"),
            "where": frame.get("where"), "corroboration": seen,
            "summary": _summary(report, rank, finding.kind, finding.collective, finding.seq,
                                finding.process_group, finding.waiting_s, frame),
        }  # fmt: skip


def merged_evidence(report: JobReport) -> dict[str, Any]:
    """What a report adds to the RAS / Inspector hang alert of the same hang (``evidence.flight_recorder``)."""
    ranks = [evidence for _, _, evidence in named_ranks(report)]
    named = {r["rank"] for r in ranks}
    return report_evidence(report, {"ranks": ranks, "job": report.job, "findings": [
        finding_evidence(f, named, report.max_named) for f in report.report.findings]})  # fmt: skip


_RANK_LISTS = ("missing_ranks", "mismatched_ranks", "waiting_ranks", "group_ranks")


def finding_evidence(finding: Finding, named: set[int], limit: int) -> dict[str, Any]:
    """A finding as an alert's evidence holds it: the frames and verdicts of the ``named`` ranks only, each list of
    ranks cut to ``limit`` (its length in ``totals`` when cut): a hang of thousands of ranks stays a small alert."""
    out = finding.as_dict()
    keep = {str(r) for r in named}
    for key in ("frames", "verdicts", "blocked_ranks"):
        out[key] = {r: v for r, v in out[key].items() if r in keep}
    return _cut(out, _RANK_LISTS, limit)


def report_evidence(report: JobReport, out: dict[str, Any]) -> dict[str, Any]:
    """``out`` with the report's own part of an alert's evidence: which ranks answered, which did not and why (lists
    cut to ``max_named``), when, and how many blamed ranks were not named one by one."""
    out.update(ranks_seen=report.report.ranks_seen, ranks_missing_dump=report.report.ranks_missing_dump,
               dump_errors=report.errors, collected=iso(report.collected_ns),
               ranks_not_named=max(0, len(blamed(report.report.findings)) - report.max_named))  # fmt: skip
    return _cut(out, ("ranks_seen", "ranks_missing_dump", "dump_errors"), report.max_named)


def _cut(out: dict[str, Any], keys: tuple[str, ...], limit: int) -> dict[str, Any]:
    """``out`` with each list of ``keys`` cut to ``limit``; the length of each cut one in ``totals``."""
    totals = {key: len(out[key]) for key in keys if len(out[key]) > limit}
    for key in totals:
        out[key] = out[key][:limit]
    if totals:
        out["totals"] = {**out.get("totals", {}), **totals}
    return out


def _summary(report: JobReport, rank: int, kind: str, collective: str, seq: int, group: str,
             waiting_s: float | None, frame: dict[str, object]) -> str:  # fmt: skip
    who = f"rank {rank}" + (f" ({frame['host']} pid {frame.get('pid')})" if frame.get("host") else "")
    what = {"collective_mismatch": f"called another op than {collective} at",
            "rank_without_dump": f"gave no dump (dead or unreachable); its peers last entered {collective}",
            "p2p_hang": f"never posted its side of its peer's {collective}"}.get(
                kind, f"never entered {collective}")  # fmt: skip
    waited = f"; peers waited {waiting_s:.0f}s" if waiting_s is not None else ""
    where = f"; at {frame['where']}" if frame.get("where") else ""
    return f"job {report.job}: {who} {what} seq {seq} of group {group}{waited}{where}"
