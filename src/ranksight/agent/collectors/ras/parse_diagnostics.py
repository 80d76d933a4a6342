"""Pure parser of a RAS ``DIAGNOSTICS`` reply (NCCL 2.31 and later, ``ncclras -D``): bytes in, a typed report out.

What the server sends (NVIDIA/nccl ``src/ras/diagnostics*.cc``, ``client_support.cc``): a text-only reply (in JSON
format the server answers ``ERROR: diagnostics only supports text output``), one finding per line, each line
``<host>:<pid> NCCL DIAG <tag><check>: <text>`` where the host and pid are those of the process that answered and the
tag is ``[OK]   `` or ``[INFO] ``; first ``=== RAS Diagnostics ===``, last ``RAS diagnostics completed in <ms> ms
across <n> RAS peers`` (``ranks`` for a communicator-scoped run); then the server closes the connection. One run at a
time per job: a concurrent request gets ``BUSY: diagnostics already in progress``. A server before 2.31 answers
``ERROR: Unknown command DIAGNOSTICS``.

Each check compares the ranks of each communicator and names the ranks that differ from the lowest one
(``rank(s) {3,5} differ from rank 0 (<its value>)``; more than eight are cut ``{..,...} (N=<total>)``), except the
Xid/SXid check, which names hosts. A finding's ``kind`` says which inconsistency it reports (the rules key on it):
``gpu_count``, ``gpu_model``, ``cuda_driver``, ``nvidia_driver``, ``ecc_uncorrected``, ``ecc_corrected``,
``nvlink_count``, ``nvlink_inactive``, ``nvlink_speed``, ``nccl_env``, ``xid``, ``sxid``; ``ok`` for a passed check,
``incomplete`` (not every rank answered, no kernel log, a truncated scan), ``unavailable`` (NVML could not tell) and
``other`` for lines this parser does not classify (kept verbatim). RCCL's port of the GPU checks names its sources
and links as AMD's (``HIP driver version``, ``XGMI``, ``unavailable via AMD SMI``); those lines get the same kinds.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from ranksight.agent.collectors.ras.errors import RasParseError
from ranksight.agent.collectors.ras.facts import normalize_hash
from ranksight.agent.collectors.ras.parse_json import load_json
from ranksight.schemas.records.ras import RasDiagnosticFinding, RasDiagnostics

BANNER = "=== RAS Diagnostics ==="
_LINE = re.compile(r"^(?P<host>.*):(?P<pid>-?\d+) NCCL DIAG (?P<body>.*)$")
_TAG = re.compile(r"^\[(?P<tag>OK|INFO)\]\s+(?P<text>.*)$")
_DONE = re.compile(
    r"^RAS diagnostics completed in (?P<ms>[\d.]+) ms across (?P<n>\d+) (?P<what>RAS peers|ranks)$"
)
_COMM = re.compile(r"\bcomm (0x[0-9a-fA-F]+)")
_RANKS = re.compile(r"rank\(s\) \{(?P<set>[\d,]*)(?:,\.\.\.)?\}(?: \(N=(?P<n>\d+)\))?")
_REFERENCE = re.compile(r"differ from rank (?P<rank>\d+) \((?P<value>.*)\)$")
_XID = re.compile(r"^S?Xid \d+")
_HOST = re.compile(r"\bon host (?P<host>\S+?)(?:\.|$|\s)")
MAX_LINE_CHARS = 4096  # the server formats each line in 1 KiB; longer is not its output

# (check name, words in the text) -> kind, first match wins
_KINDS: list[tuple[str, str, str]] = [
    ("GPU inventory", "count mismatch", "gpu_count"),
    ("GPU inventory", "model mismatch", "gpu_model"),
    ("CUDA driver version", "mismatch", "cuda_driver"),
    ("NVIDIA graphics driver version", "mismatch", "nvidia_driver"),
    ("ECC", "uncorrected volatile errors on", "ecc_uncorrected"),
    ("ECC", "corrected volatile errors at or above", "ecc_corrected"),
    ("NVLink", "link-count mismatch", "nvlink_count"),
    ("NVLink", "inactive link", "nvlink_inactive"),
    ("NVLink", "inconsistent link speeds", "nvlink_speed"),
    # RCCL's port (ROCm/rocm-systems projects/rccl/src/ras/diagnostics_gpu.cc): AMD SMI instead of NVML, the HIP
    # driver version for the CUDA one, XGMI links for NVLinks (no speed read: no speed finding)
    ("HIP driver version", "mismatch", "cuda_driver"),
    ("XGMI", "link-count mismatch", "nvlink_count"),
    ("XGMI", "inactive link", "nvlink_inactive"),
    ("NCCL environment", "mismatch", "nccl_env"),
    ("NCCL environment", "=", "nccl_env"),
    ("NCCL environment", "differ across ranks", "nccl_env"),
]


def _kind(tag: str, check: str, text: str) -> str:
    if check.startswith("Xid ") or check.startswith("SXid "):
        return "ok" if tag == "ok" else check.split(" ", 1)[0].lower()
    if tag == "ok":
        return "ok"
    if "diagnostics incomplete" in text or "incomplete for comm" in text or check == "Xid/SXid":
        return "incomplete"
    if "unavailable" in text:
        return "unavailable"
    for name, words, kind in _KINDS:
        if check == name and words in text:
            return kind
    return "other"


def _finding(tag: Literal["ok", "info"], text: str) -> RasDiagnosticFinding:
    xid = _XID.match(text)
    if xid:  # "Xid 79 detected 2 times on host h. ...": no "<check>: " (its guidance may hold a URL's colon)
        check, rest = xid[0], text
    else:
        check, _, rest = text.partition(": ")
    comm = _COMM.search(text)
    ranks = _RANKS.search(text)
    reference = _REFERENCE.search(text)
    host = _HOST.search(text)
    shown = [int(r) for r in ranks["set"].split(",") if r] if ranks else []
    return RasDiagnosticFinding(
        tag=tag,
        check=check,
        kind=_kind(tag, check, rest),
        text=text,
        comm=normalize_hash(comm[1]) if comm else None,
        ranks=shown,
        ranks_total=int(ranks["n"]) if ranks and ranks["n"] else len(shown),
        reference_rank=int(reference["rank"]) if reference else None,
        reference_value=reference["value"] if reference else None,
        hosts=[host["host"]] if host else [],
    )


def parse_diagnostics(data: bytes) -> RasDiagnostics:
    """The reply to ``DIAGNOSTICS``; a ``BUSY:`` or ``ERROR:`` reply is a report with that status, not an error.
    :class:`RasParseError` when the bytes are none of those."""
    text = data.decode("utf-8", errors="replace")
    lines = [line.rstrip("\r") for line in text.split("\n") if line.strip()]
    if not lines:
        raise RasParseError("empty diagnostics reply")
    first = lines[0]
    if first.startswith("BUSY:"):
        return RasDiagnostics(status="busy", message=first)
    if first.startswith("ERROR:"):
        unsupported = first.startswith("ERROR: Unknown command")
        return RasDiagnostics(status="unsupported" if unsupported else "error", message=first)
    report = RasDiagnostics(status="incomplete")
    findings: list[RasDiagnosticFinding] = []
    env_comm: str | None = (
        None  # the NCCL environment check's per-value lines follow its mismatch line, comm-less
    )
    for number, line in enumerate(lines, 1):
        match = _LINE.match(line)
        if match is None or len(line) > MAX_LINE_CHARS:
            raise RasParseError(f"line {number} is not a diagnostics line: {line[:120]!r}")
        report.host, report.pid = match["host"], int(match["pid"])
        body = match["body"]
        done = _DONE.match(body)
        tagged = _TAG.match(body)
        if body == BANNER:
            continue
        if done:
            report.status, report.completed_ms, report.peers = "ok", float(done["ms"]), int(done["n"])
            report.scope = "job" if done["what"] == "RAS peers" else "comm"
        elif tagged:
            finding = _finding("ok" if tagged["tag"] == "OK" else "info", tagged["text"])
            if finding.check == "NCCL environment":
                env_comm = finding.comm = finding.comm or env_comm
            findings.append(finding)
        elif body.startswith("ERROR:"):
            report.status, report.message = "error", body
        else:
            findings.append(RasDiagnosticFinding(tag="info", check="", kind="other", text=body))
    report.findings = findings
    return report


def rank_hosts(status_json: bytes, wanted: dict[str, set[int]]) -> dict[str, dict[int, str]]:
    """From a JSON ``STATUS`` reply, the host of each wanted (communicator, rank): what names the hosts behind a
    diagnostics finding's rank set. Communicators and ranks it does not list are left out."""
    try:
        obj: Any = load_json(status_json)
    except RasParseError:
        return {}
    out: dict[str, dict[int, str]] = {}
    for comm in obj.get("communicators", []) if isinstance(obj, dict) else []:
        if not isinstance(comm, dict) or not isinstance(comm.get("hash"), str):
            continue
        key = normalize_hash(comm["hash"])
        ranks = wanted.get(key)
        if not ranks:
            continue
        for entry in [*comm.get("ranks", []), *comm.get("missing_ranks", [])]:
            if isinstance(entry, dict) and entry.get("rank") in ranks and isinstance(entry.get("host"), str):
                out.setdefault(key, {})[entry["rank"]] = entry["host"]
    return out
