"""JSON ``STATUS`` replies (``SET FORMAT json``, NCCL >= 2.28.7) -> :class:`RasStatus`.

Faithful to NCCL's ``rasDumpCommsToJSON``: per communicator ``ranks[]`` with ``status`` {init_state, async_error,
finalize_called, destroy_flag, abort_flag} and ``collective_counts``, and ``missing_ranks[]`` with ``status``
{unresponsive, considered_dead}. 2.28.7 and 2.28.9 omit the comma after ``"nvml_dev": N`` in ``missing_ranks[]``
entries; that is repaired. ``init_state``/``async_error`` of 0 (success) and 7 (in progress) are normal. Rank status
and flags follow the server's own text logic: abort -> ABORT, finalize or destroy -> FINALIZE, init 0 -> RUNNING,
else INIT; differing statuses or op counts -> MISMATCH; a missing rank that is unresponsive or dead -> INCOMPLETE.

Ranks the server cannot name are written ``"host": "unknown", "pid": -1``: they are ``unknown_ranks`` of their
communicator, never a node or a process. The JSON writer emits communicators only, with no job-level INCOMPLETE/DEAD
sections, so the result says ``job_sections: false``: a process that left no communicator data is invisible here.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ranksight.agent.collectors.ras.errors import RasParseError
from ranksight.agent.collectors.ras.facts import (
    Flags,
    add_evidence,
    add_process,
    normalize_hash,
    normalize_secondary,
    sane_count,
)
from ranksight.schemas.records.ras import RasCommunicator, RasLaggingRank, RasMismatch, RasProcess, RasStatus

NORMAL_CODES = (0, 7)  # ncclSuccess, ncclInProgress
_STATUS_RANK = {
    "NOCOMM": 0,
    "INIT": 1,
    "RUNNING": 2,
    "FINALIZE": 3,
    "ABORT": 4,
}  # the server's statusStr order
# A value followed by a newline and the next key, with no comma between: the 2.28.7/2.28.9 bug.
_MISSING_COMMA = re.compile(r'(?<=[\d"el\]}])(\s*\n\s*"[^"\n]+"\s*:)')
UNKNOWN_HOST = "unknown"  # with pid -1: a rank whose process the server cannot name


def is_placeholder(entry: dict[str, Any]) -> bool:
    return entry.get("host") == UNKNOWN_HOST and entry.get("pid") == -1


def _line(entry: Any) -> str:
    """One JSON entry as one evidence line."""
    return json.dumps(entry, separators=(",", ":"), sort_keys=True)


def load_json(data: bytes) -> Any:
    """Decode, repairing the missing-comma bug only if the text does not parse as it is."""
    text = data.decode("utf-8", errors="replace")
    try:
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            return json.loads(_MISSING_COMMA.sub(r",\1", text))
    except ValueError as exc:  # not JSON even repaired, or a number too long to convert (Python's int limit)
        raise RasParseError(f"invalid JSON status: {exc}") from None


def _rank_status(status: dict[str, Any]) -> str:
    if status.get("abort_flag"):
        return "ABORT"
    if status.get("finalize_called") or status.get("destroy_flag"):
        return "FINALIZE"
    return "RUNNING" if status.get("init_state", 0) == 0 else "INIT"


def _comm(raw: dict[str, Any], flags: Flags, missing: list[RasProcess], dead: list[RasProcess],
          mismatches: list[RasMismatch]) -> RasCommunicator:  # fmt: skip
    key = normalize_hash(str(raw["hash"]))
    ranks = raw.get("ranks") or []
    errors: list[str] = []
    rank_status: dict[str, int] = {}
    counts_by_coll: dict[str, set[int]] = {}
    evidence: list[str] = []
    for rank in ranks:
        status = rank.get("status") or {}
        name = _rank_status(status)
        rank_status[name] = rank_status.get(name, 0) + 1
        if any(status.get(k, 0) not in NORMAL_CODES for k in ("init_state", "async_error")):
            errors.append("ERROR")
            add_evidence(evidence, _line(rank))
        elif name in ("ABORT", "INIT"):
            add_evidence(evidence, _line(rank))
        for coll, count in (rank.get("collective_counts") or {}).items():
            counts_by_coll.setdefault(str(coll), set()).add(int(count))
    missing_ranks: list[int] = []
    unknown_ranks: list[int] = []
    for gone in raw.get("missing_ranks") or []:
        status = gone.get("status") or {}
        if status.get("unresponsive") or status.get("considered_dead"):
            errors.append("INCOMPLETE")
            line = _line(gone)
            add_evidence(evidence, line)
            if is_placeholder(gone):
                unknown_ranks.append(int(gone["rank"]))
                continue
            missing_ranks.append(int(gone["rank"]))
            gpus = [int(gone["cuda_dev"])] if isinstance(gone.get("cuda_dev"), int) else []
            host, pid = str(gone.get("host", "?")), sane_count(int(gone.get("pid", -1)))
            add_process(dead if status.get("considered_dead") else missing, host, pid, gpus, comm=key,
                        rank=int(gone["rank"]), evidence=[line])  # fmt: skip
        else:  # answered, but not as a member of this communicator
            rank_status["NOCOMM"] = rank_status.get("NOCOMM", 0) + 1
    if "ABORT" in rank_status:
        errors.append("ABORT")
    if len(rank_status) > 1:
        errors.append("MISMATCH")
        mismatches.append(RasMismatch(hash=key, kind="status"))
    for coll, values in counts_by_coll.items():
        if len(values) > 1:
            errors.append("MISMATCH")
            mismatches.append(RasMismatch(hash=key, kind="op_count", collective=coll))
            add_evidence(evidence, f"{coll} operation counts differ: {sorted(values)}")
    lagging = _lagging(ranks, {coll: max(values) for coll, values in counts_by_coll.items()})
    flags_seen = [f for f in ("INCOMPLETE", "ERROR", "MISMATCH", "ABORT") if f in errors]
    for flag in flags_seen:
        flags.flag(flag)
    status_name = max(rank_status, key=_STATUS_RANK.__getitem__) if rank_status else None
    return RasCommunicator(
        hash=key,
        secondary_hash=normalize_secondary(str(raw["secondary_hash"])) if raw.get("secondary_hash") else None,
        size=sane_count(int(raw["size"])) if "size" in raw else None,
        status=status_name,
        errors=[f for f in flags_seen if f != "ABORT"],
        missing_ranks=sorted(missing_ranks),
        unknown_ranks=sorted(unknown_ranks),
        evidence=evidence,
        ranks_reporting=len(ranks),
        rank_status=rank_status,
        op_counts={coll: max(values) for coll, values in counts_by_coll.items()},
        lagging_ranks=lagging,
    )


MAX_LAGGING = 64  # a hang has a few culprits; many ranks behind is a snapshot of a running job


def _lagging(ranks: list[dict[str, Any]], highest: dict[str, int]) -> list[RasLaggingRank]:
    """Ranks whose count of a collective is below the highest, when they are a minority of the comm."""
    out = []
    for coll, top in highest.items():
        behind = [r for r in ranks if int((r.get("collective_counts") or {}).get(coll, top)) < top]
        if not behind or 2 * len(behind) > len(ranks):
            continue
        out += [RasLaggingRank(rank=int(r.get("rank", -1)), host=str(r.get("host", "?")), pid=sane_count(int(r.get("pid", -1))),
                               collective=coll, count=int(r["collective_counts"][coll]), peers_count=top)
                for r in behind]  # fmt: skip
    return out[:MAX_LAGGING]


def parse_status_json(data: bytes) -> RasStatus:
    doc = load_json(data)
    if not isinstance(doc, dict) or not isinstance(doc.get("communicators"), list):
        raise RasParseError("not a RAS JSON status: no 'communicators' list")
    flags = Flags()
    missing: list[RasProcess] = []
    dead: list[RasProcess] = []
    mismatches: list[RasMismatch] = []
    try:
        comms = [_comm(c, flags, missing, dead, mismatches) for c in doc["communicators"]]
        ras = doc.get("ras") or {}
        timeouts = sane_count(int(ras.get("timeouts_count", 0))) or 0
        collection = ras.get("collection_time_sec")
        hosts, procs, gpus = set(), set(), set()
        for c in doc["communicators"]:
            for r in [*(c.get("ranks") or []), *(c.get("missing_ranks") or [])]:
                if is_placeholder(r):
                    continue
                hosts.add(r.get("host"))
                procs.add((r.get("host"), r.get("pid")))
                gpus.add((r.get("host"), r.get("pid"), r.get("cuda_dev")))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise RasParseError(f"malformed RAS JSON status: {type(exc).__name__}: {exc}") from None
    if dead:
        flags.flag("DEAD")
    if timeouts:
        flags.flag("TIMEOUT")
    version = doc.get("nccl_version")
    return RasStatus(
        format="json", version=str(version) if version is not None else None, health=flags.health(),
        nodes=len(hosts) or None, processes=len(procs) or None, gpus=len(gpus) or None, communicators=comms,
        missing_processes=missing, dead_processes=dead, mismatches=mismatches, timeouts=timeouts,
        collection_s=float(collection) if isinstance(collection, int | float) else None, job_sections=False,
    )  # fmt: skip
