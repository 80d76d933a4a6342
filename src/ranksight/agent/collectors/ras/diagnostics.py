"""One RAS diagnostics run, with the hosts behind its findings: the ``DIAGNOSTICS`` reply names the ranks of a
communicator that differ; a JSON ``STATUS`` of the same endpoint names the host of each rank, so the report says
which hosts differ (the Xid/SXid check names its hosts itself). Thin I/O around the pure parsers."""

from __future__ import annotations

from ranksight.agent.collectors.ras.client import RasClient
from ranksight.agent.collectors.ras.errors import RasClientError
from ranksight.agent.collectors.ras.parse_diagnostics import parse_diagnostics, rank_hosts
from ranksight.schemas.records.ras import RasDiagnostics

# the finding kinds that report an inconsistency between ranks or hosts (the others: passed, unknown, incomplete)
INCONSISTENT = frozenset({"gpu_count", "gpu_model", "cuda_driver", "nvidia_driver", "ecc_uncorrected",
                          "ecc_corrected", "nvlink_count", "nvlink_inactive", "nvlink_speed", "nccl_env", "xid",
                          "sxid"})  # fmt: skip


async def run_diagnostics(client: RasClient) -> RasDiagnostics:
    """Run diagnostics and resolve the hosts of the ranks its findings name (where a JSON status lists them)."""
    report = parse_diagnostics(await client.diagnostics())
    if report.status == "unsupported":
        client.features.diagnostics = False
    wanted: dict[str, set[int]] = {}
    for f in report.findings:
        if f.kind in INCONSISTENT and f.comm is not None and f.ranks:
            wanted.setdefault(f.comm, set()).update(f.ranks)
    if not wanted:
        return report
    try:
        fmt, body = await client.status(prefer_json=True)
    except RasClientError:
        return report  # the findings keep their ranks; hosts stay unnamed
    hosts = rank_hosts(body, wanted) if fmt == "json" else {}
    for f in report.findings:
        names = hosts.get(f.comm or "", {})
        if not f.hosts and names:
            f.hosts = sorted({names[r] for r in f.ranks if r in names})
    return report
