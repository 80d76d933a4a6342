"""RAS ``DIAGNOSTICS`` replies, byte for byte as the NCCL 2.32 server writes them for given check results (NVIDIA/nccl
``src/ras/diagnostics.cc``, ``diagnostics_gpu.cc``, ``diagnostics_env.cc``, ``diagnostics_xid.cc``,
``diagnostics_checks_common.cc``; the client command in ``client_support.cc`` as RCCL's microtests of it show it;
commits in ``fixtures/ras/diagnostics/PROVENANCE.md``).

Restated: every line goes out as ``<hostname>:<pid> NCCL DIAG <line>\\n`` (the answering process); the run opens with
``=== RAS Diagnostics ===``, each check reports ``<tag><check>: ...`` per communicator with the tags ``[OK]   `` and
``[INFO] ``, a rank set shows at most eight ranks (``{1,2,...} (N=12)``), comm hashes print as ``0x%lx``, and the run
closes with ``RAS diagnostics completed in %.1f ms across %d RAS peers``; then the server closes the connection.

``python tests/ras_diagnostics_replies.py`` rewrites the committed fixtures.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

TARGET = Path(__file__).resolve().parents[1] / "fixtures/ras/diagnostics"
OK, INFO = "[OK]   ", "[INFO] "
XID_DOC = "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"
RANK_SET_MAX = 8


def rank_set(ranks: Sequence[int]) -> str:
    shown = list(ranks[:RANK_SET_MAX])
    text = "{" + ",".join(str(r) for r in shown)
    return text + (f",...}} (N={len(ranks)})" if len(ranks) > len(shown) else "}")


def reply(host: str, pid: int, lines: Sequence[str], ms: float, peers: int) -> bytes:
    body = [
        "=== RAS Diagnostics ===",
        *lines,
        f"RAS diagnostics completed in {ms:.1f} ms across {peers} RAS peers",
    ]
    return "".join(f"{host}:{pid} NCCL DIAG {line}\n" for line in body).encode()


def healthy(comm: int, ranks: int, hosts: int) -> list[str]:
    return [
        f"{OK}GPU inventory: 8x NVIDIA H100 80GB HBM3 per node consistent across {ranks} ranks in comm 0x{comm:x}",
        f"{OK}CUDA driver version: 13000 consistent across {ranks} ranks in comm 0x{comm:x}",
        f"{OK}ECC: no uncorrected volatile errors across {ranks} ranks in comm 0x{comm:x}",
        f"{OK}NVLink: 18 links per GPU, all active at consistent speed across {ranks} ranks in comm 0x{comm:x}",
        f"{OK}NCCL environment: NCCL_* env vars consistent across {ranks} ranks in comm 0x{comm:x}",
        f"{OK}Xid/SXid: no events requiring immediate attention across {hosts} host{'s' if hosts != 1 else ''}",
        f"{OK}NVIDIA graphics driver version: 580.95.05 consistent across {ranks} ranks in comm 0x{comm:x}",
    ]


def inconsistent(comm: int, ranks: int) -> list[str]:
    c = f"0x{comm:x}"
    return [
        f"{OK}GPU inventory: 8x NVIDIA H100 80GB HBM3 per node consistent across {ranks} ranks in comm {c}",
        f"{INFO}CUDA driver version: mismatch across {ranks} ranks in comm {c}, rank(s) {rank_set([8, 9, 10, 11, 12, 13, 14, 15, 40])} differ from rank 0 (13000)",
        f"{INFO}ECC: uncorrected volatile errors on rank(s) {rank_set([17])} (worst=3) across {ranks} ranks in comm {c}",
        f"{INFO}NVLink: inactive link(s) on rank(s) {rank_set([24, 25])} across {ranks} ranks in comm {c}",
        f"{INFO}NVLink: inconsistent link speeds on rank(s) {rank_set([24])} across {ranks} ranks in comm {c}",
        f"{INFO}NCCL environment: mismatch across {ranks} ranks in comm {c} for NCCL_IB_HCA",
        f"{INFO}NCCL environment: NCCL_IB_HCA=mlx5_0,mlx5_1 on rank(s) {rank_set(list(range(0, 8)) + list(range(9, ranks)))}",
        f"{INFO}NCCL environment: NCCL_IB_HCA=(unset) on rank(s) {rank_set([8])}",
        f"{INFO}NCCL environment: 1 NCCL_* env var(s) differ across ranks in comm {c}",
        f"{INFO}Xid 79 detected 2 times on host node003. The NVIDIA Xid catalog recommends resetting the affected GPU. "
        f"Follow the documented GPU-reset capabilities and limitations: {XID_DOC}",
        f"{OK}Xid 63 detected 1 time on host node001. No user action or further investigation is required for this Xid.",
        f"{INFO}NVIDIA graphics driver version: mismatch across {ranks} ranks in comm {c}, rank(s) {rank_set([8, 9, 10, 11, 12, 13, 14, 15])} differ from rank 0 (580.95.05)",
    ]  # fmt: skip


COMM = 0x3B2FE521BF43BC04
FIXTURES = {
    "nccl_2.32_diagnostics_healthy_4node_32rank.txt": reply("node000", 41234, healthy(COMM, 32, 4), 48.3, 32),
    "nccl_2.32_diagnostics_inconsistent_4node_32rank.txt": reply(
        "node000", 41234, inconsistent(COMM, 32), 51.9, 32
    ),
    "nccl_2.32_diagnostics_busy.txt": b"BUSY: diagnostics already in progress\n",
    "nccl_2.32_diagnostics_json_format.txt": b"ERROR: diagnostics only supports text output\n",
    "nccl_2.30_diagnostics_unknown_command.txt": b"ERROR: Unknown command DIAGNOSTICS\n",
}


def render() -> dict[Path, bytes]:
    return {TARGET / name: data for name, data in FIXTURES.items()}


def main() -> None:
    TARGET.mkdir(parents=True, exist_ok=True)
    for path, data in render().items():
        path.write_bytes(data)


if __name__ == "__main__":
    main()
