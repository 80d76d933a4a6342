"""What a per-job report shows, read from the DuckDB history (:func:`collect`, on a sandbox reader cursor): the job's
window and communicators (RAS), step time, per-rank compute share and bus bandwidth per communicator (the agents'
Inspector summaries, which cover every record), the findings (alerts, straggler runs), GPU-hours lost per cause,
hardware evidence (GPU and NIC samples), the link map (probes) and what the data covered. Every list is bounded by
:class:`~ranksight.aggregator.component_settings.ReportSettings`; what a bound leaves out is counted, never dropped silently.

GPU-hours lost per cause (each clipped to the job's window):

- ``straggler``: the job's GPUs times compute stragglers' cost (the share of job time lost waiting for the slowest rank), the worst
  finding of each evaluation integrated over time: the job runs at its slowest rank's pace, so costs do not add up;
- ``degraded link``: the same for communication stragglers (slow cross-node communicators);
- ``hang``: the job's GPUs times the time a hang alert (``comm_hang``, ``collective_hang``) fired: no collective advanced;
- ``dead rank``: the time a ``rank_missing`` or ``process_dead`` alert fired, times the GPUs of that process (they do
  nothing); when the job then stops, waiting for it, that is a hang.
"""

from __future__ import annotations

import datetime
import itertools
import statistics
from dataclasses import dataclass, field
from typing import Any

import duckdb

from ranksight.aggregator.component_settings import ReportSettings
from ranksight.errors import QueryFailed

US = 1_000_000
COMM = "'0x' || ltrim(lower(regexp_replace(comm_id, '^0[xX]', '')), '0')"  # as RAS hashes are normalized
HANG_RULES = ("comm_hang", "collective_hang")
DEAD_RULES = ("rank_missing", "process_dead")
CAUSES = ("straggler", "degraded link", "hang", "dead rank")
MAX_EVIDENCE_NODES = 32  # nodes named by findings whose GPU and NIC samples are shown
MATRIX_NODES = 48  # up to this many probed nodes: a matrix; beyond, the slowest links as a list


class JobNotFound(QueryFailed, LookupError):
    """No history names this job (RAS polls, the training client's reports)."""


@dataclass
class Coverage:
    since: str
    until: str
    duration_s: float
    ras_polls: int
    ras_gpus: int | None
    ranks_seen: int
    nodes_seen: int
    summary_windows: int
    operations: int
    capture_models: list[str]
    step_source: str  # "client" (ranksight.client step reports), "inspector" (collective cadence) or "none"
    gpu_samples: int
    nic_samples: int
    probes: int
    notes: list[str] = field(default_factory=list)


@dataclass
class JobReport:
    cluster: str
    job: str
    generated: str
    ended: bool
    health: str | None
    version: str | None
    coverage: Coverage
    # step time: bucket start (epoch s), median and max over ranks (s)
    step_t: list[float] = field(default_factory=list)
    step_median: list[float] = field(default_factory=list)
    step_max: list[float] = field(default_factory=list)
    # compute share per rank, in rank order: (host, pid, rank, share 0-1)
    ranks: list[tuple[str, int, int, float]] = field(default_factory=list)
    ranks_left_out: int = 0
    # bus bandwidth per communicator, slowest first: (label, comm id, ranks, mean GB/s, min GB/s)
    comms: list[tuple[str, str, int, float, float]] = field(default_factory=list)
    comms_left_out: int = 0
    # findings: (kind, rule or straggler kind, severity, node, rank, summary, start epoch s, end epoch s)
    findings: list[tuple[str, str, str, str, int | None, str, float, float]] = field(default_factory=list)
    findings_left_out: int = 0
    gpu_hours: dict[str, float] = field(default_factory=dict)
    job_gpu_hours: float = 0.0
    # hardware evidence rows: (node, device, metric, value, typical, unit)
    hardware: list[tuple[str, str, str, float, float, str]] = field(default_factory=list)
    # links: (src, dst, Gbit/s or None, RTT us or None)
    links: list[tuple[str, str, float | None, float | None]] = field(default_factory=list)
    links_total: int = 0
    link_median_gbps: float | None = None
    link_nodes: list[str] = field(default_factory=list)


def _ts(value: Any) -> float:
    if isinstance(value, datetime.datetime):
        return value.replace(tzinfo=datetime.UTC).timestamp()
    return float(value)


def _iso(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def collect(cur: duckdb.DuckDBPyConnection, job: str, cluster: str | None, limits: ReportSettings,
            now_s: float) -> JobReport:  # fmt: skip
    """The report of ``job`` from the history ``cur`` reads; :class:`JobNotFound` when nothing names it."""
    where_cluster = "AND cluster = ?" if cluster else ""
    args: list[Any] = [job, *([cluster] if cluster else [])]
    ras = cur.execute(f"""SELECT min(recv_ts), max(recv_ts), any_value(cluster), max(gpus), count(*),
            arg_max(health, recv_ts), arg_max(version, recv_ts) FROM ras WHERE job_id = ? {where_cluster}""",
                      args).fetchone()  # fmt: skip
    app = cur.execute(f"SELECT min(recv_ts), max(recv_ts), any_value(cluster) FROM app WHERE job_id = ? {where_cluster}",
                      args).fetchone()  # fmt: skip
    found = [r for r in (ras, app) if r is not None and r[0] is not None]
    if not found:
        raise JobNotFound(f"no history names job {job!r} (RAS polls or training-client reports)")
    since = min(_ts(r[0]) for r in found)
    closed = cur.execute(f"SELECT max(recv_ts) FROM ras_event WHERE job_id = ? AND event = 'ENDPOINT_CLOSED' "
                         f"{where_cluster}", args).fetchone()  # fmt: skip
    ended = closed is not None and closed[0] is not None
    until = max([_ts(r[1]) for r in found] + ([_ts(closed[0])] if closed and closed[0] else []))
    until = max(until, since + 1.0)
    cluster = cluster or str(found[0][2])
    hashes = [str(h) for (h,) in cur.execute(
        f"SELECT DISTINCT '0x' || ltrim(lower(regexp_replace(h, '^0[xX]', '')), '0') FROM (SELECT unnest("
        f"json_extract_string(communicators, '$[*].hash')) AS h FROM ras WHERE job_id = ? {where_cluster}) "
        "WHERE h IS NOT NULL", args).fetchall()]  # fmt: skip
    since_us, until_us = int(since * US), int(until * US) + 1
    # the job's Inspector summaries: a temporary view every later query reads
    cur.execute("DROP VIEW IF EXISTS report_summary")
    cur.execute(f"""CREATE TEMP VIEW report_summary AS SELECT * FROM inspector_summary WHERE cluster = {_lit(cluster)}
        AND op_kind = 'coll' AND {COMM} IN ({", ".join(_lit(h) for h in hashes) or "NULL"})
        AND window_start_us >= {since_us - 60 * US} AND window_start_us < {until_us}""")  # fmt: skip
    report = JobReport(cluster=cluster, job=job, generated=_iso(now_s), ended=ended,
                       health=ras[5] if ras else None, version=ras[6] if ras else None,
                       coverage=_coverage(cur, cluster, job, since, until, ras))  # fmt: skip
    _ranks(cur, report, limits)
    _steps(cur, report, job, since_us, until_us, limits)
    _comms(cur, report, limits)
    _findings(cur, report, job, since, until, limits)
    _gpu_hours(report)
    _hardware(cur, report, since, until)
    _links(cur, report, since, until, limits)
    cur.execute("DROP VIEW IF EXISTS report_summary")
    return report


def _lit(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _coverage(cur: duckdb.DuckDBPyConnection, cluster: str, job: str, since: float, until: float,
              ras: tuple[Any, ...] | None) -> Coverage:  # fmt: skip
    windows, operations, ranks, nodes, models = cur.execute(
        "SELECT count(DISTINCT window_start_us), coalesce(sum(count), 0), count(DISTINCT (hostname, pid)), "
        "count(DISTINCT hostname), list(DISTINCT capture_model) FROM report_summary").fetchone() or (0, 0, 0, 0, [])  # fmt: skip
    span = [datetime.datetime.fromtimestamp(t, datetime.UTC).replace(tzinfo=None) for t in (since, until)]
    counts = {}
    for table, column in (("gpu", "node"), ("nic", "node"), ("probe", "src")):
        [(n,)] = cur.execute(f"SELECT count(*) FROM {table} WHERE cluster = ? AND recv_ts BETWEEN ? AND ? AND "
                             f"{column} IN (SELECT DISTINCT hostname FROM report_summary)",
                             [cluster, *span]).fetchall()  # fmt: skip
        counts[table] = int(n)
    [(steps,)] = cur.execute(
        "SELECT count(*) FROM app WHERE job_id = ? AND step_time_s IS NOT NULL", [job]
    ).fetchall()
    cov = Coverage(since=_iso(since), until=_iso(until), duration_s=until - since, ras_polls=int(ras[4]) if ras else 0,
                   ras_gpus=int(ras[3]) if ras and ras[3] is not None else None, ranks_seen=int(ranks),
                   nodes_seen=int(nodes), summary_windows=int(windows), operations=int(operations),
                   capture_models=sorted(str(m) for m in models or [] if m),
                   step_source="client" if steps else "inspector" if windows else "none",
                   gpu_samples=counts["gpu"], nic_samples=counts["nic"], probes=counts["probe"])  # fmt: skip
    if cov.ras_gpus and ranks < cov.ras_gpus:
        cov.notes.append(f"Inspector data from {ranks} of the {cov.ras_gpus} ranks RAS counts: the others' "
                         "collectives are not in the heatmap or the bandwidths")  # fmt: skip
    if not windows:
        cov.notes.append("no Inspector summaries for the job's communicators: no compute share, bandwidth or straggler "
                         "evidence")  # fmt: skip
    if cov.step_source == "inspector":
        cov.notes.append("no step reports (ranksight.client): step time is the period of each rank's largest "
                         "collective, once per step in data-parallel training")  # fmt: skip
    if "sampled" in cov.capture_models:
        cov.notes.append("sampled capture (NCCL 2.28/2.29 Inspector): one operation per communicator per dump, so "
                         "short or intermittent slowdowns may not show")  # fmt: skip
    if not cov.probes:
        cov.notes.append("no link probe between the job's nodes in its window (heavy probes skip busy nodes)")
    return cov


def _ranks(cur: duckdb.DuckDBPyConnection, report: JobReport, limits: ReportSettings) -> None:
    """Each process's share of time outside collectives: 1 - its collective time (timed operations scaled to all)
    over the windows it reported in. A compute straggler arrives late and waits least: the highest share."""
    rows = cur.execute("""SELECT hostname, pid, arg_max(rank, n_ranks) AS rank,
            sum(exec_sum_us * count / nullif(timed, 0)) AS coll_us,
            count(DISTINCT window_start_us) * any_value(window_us) AS covered_us
        FROM report_summary GROUP BY hostname, pid ORDER BY rank, hostname, pid LIMIT ?""",
                       [limits.max_ranks + 1]).fetchall()  # fmt: skip
    [(total,)] = cur.execute("SELECT count(DISTINCT (hostname, pid)) FROM report_summary").fetchall()
    report.ranks = [(str(h), int(p), int(r), max(0.0, min(1.0, 1 - (c or 0) / cov)) if cov else 0.0)
                    for h, p, r, c, cov in rows[: limits.max_ranks]]  # fmt: skip
    report.ranks_left_out = int(total) - len(report.ranks)


def _steps(cur: duckdb.DuckDBPyConnection, report: JobReport, job: str, since_us: int, until_us: int,
           limits: ReportSettings) -> None:  # fmt: skip
    step = max(1, (until_us - since_us) // limits.max_points)
    if report.coverage.step_source == "client":
        rows = cur.execute("""SELECT (client_ts // 1000) // ? * ? AS b, median(step_time_s), max(step_time_s)
            FROM app WHERE job_id = ? AND event = 'heartbeat' AND step_time_s IS NOT NULL GROUP BY b ORDER BY b""",
                           [step, step, job]).fetchall()  # fmt: skip
    else:
        rows = cur.execute("""WITH r AS (SELECT hostname, pid, comm_id, window_start_us, window_us, size_bucket,
                sum(count) AS count FROM report_summary GROUP BY ALL),
            l AS (SELECT *, max(size_bucket) OVER (PARTITION BY comm_id, hostname, pid, window_start_us) AS largest
                FROM r),
            p AS (SELECT window_start_us // ? * ? AS b, hostname, pid, avg(window_us / count) / 1e6 AS period
                FROM l WHERE size_bucket = largest AND count > 0 GROUP BY ALL)
            SELECT b, median(period), max(period) FROM p GROUP BY b ORDER BY b""", [step, step]).fetchall()  # fmt: skip
    report.step_t = [b / US for b, _, _ in rows]
    report.step_median = [float(m) for _, m, _ in rows]
    report.step_max = [float(m) for _, _, m in rows]


def _comms(cur: duckdb.DuckDBPyConnection, report: JobReport, limits: ReportSettings) -> None:
    rows = cur.execute("""SELECT coalesce(any_value(comm_name), comm_id), comm_id, max(n_ranks), avg(busbw_gbs),
            min(busbw_gbs) FROM report_summary WHERE busbw_gbs IS NOT NULL GROUP BY comm_id ORDER BY 4, 2
        LIMIT ?""", [limits.max_comms + 1]).fetchall()  # fmt: skip
    [(total,)] = cur.execute(
        "SELECT count(DISTINCT comm_id) FROM report_summary WHERE busbw_gbs IS NOT NULL"
    ).fetchall()
    report.comms = [
        (str(a), str(b), int(c), float(d), float(e)) for a, b, c, d, e in rows[: limits.max_comms]
    ]
    report.comms_left_out = int(total) - len(report.comms)


def _findings(cur: duckdb.DuckDBPyConnection, report: JobReport, job: str, since: float, until: float,
              limits: ReportSettings) -> None:  # fmt: skip
    span = [datetime.datetime.fromtimestamp(t, datetime.UTC).replace(tzinfo=None) for t in (since, until)]
    alerts = cur.execute("""SELECT 'alert', rule, any_value(severity), any_value(node), any_value(rank),
            arg_max(summary, updated_at), min(started_at), max(coalesce(resolved_at, updated_at)),
            arg_max(state, updated_at), coalesce(json_array_length(arg_max(evidence, updated_at), '$.gpus'), 1)
        FROM alerts WHERE cluster = ? AND rule NOT IN ('job_started', 'job_ended')
            AND (job = ? OR node IN (SELECT DISTINCT hostname FROM report_summary))
        GROUP BY fingerprint, rule HAVING min(started_at) <= ? AND max(coalesce(resolved_at, updated_at)) >= ?
        ORDER BY min(started_at) LIMIT ?""", [report.cluster, job, span[1], span[0], limits.max_findings + 1]).fetchall()  # fmt: skip
    runs = cur.execute("""WITH e AS (SELECT hostname, pid, evaluated_at, kind, max(slowdown) AS slowdown,
                max(cost) AS cost, any_value(rank) AS rank FROM straggler_finding_history
            WHERE cluster = ? AND evaluated_at BETWEEN ? AND ?
                AND hostname IN (SELECT DISTINCT hostname FROM report_summary) GROUP BY ALL),
        g AS (SELECT *, coalesce(evaluated_at - lag(evaluated_at) OVER (PARTITION BY hostname, pid, kind
                ORDER BY evaluated_at) > INTERVAL 60 SECOND, TRUE)::INT AS starts FROM e),
        r AS (SELECT *, sum(starts) OVER (PARTITION BY hostname, pid, kind ORDER BY evaluated_at) AS run FROM g)
        SELECT 'straggler', kind || ' straggler', CASE WHEN max(slowdown) >= 1.5 THEN 'critical' ELSE 'warning' END,
            hostname, any_value(rank), kind || ' straggler on ' || hostname || coalesce(' pid ' || pid, '')
            || ': up to ' || round(max(slowdown), 2) || 'x slower, ' || round(100 * coalesce(avg(cost), 0), 1)
            || ' % of job time', min(evaluated_at), max(evaluated_at), 'run', 0
        FROM r GROUP BY hostname, pid, kind, run ORDER BY 7 LIMIT ?""",
                       [report.cluster, *span, limits.max_findings + 1]).fetchall()  # fmt: skip
    rows = sorted([*alerts, *runs], key=lambda r: _ts(r[6]))
    # an alert still firing lasts to the end of the window
    report.findings = [(str(k), str(rule), str(sev), str(node or ""), None if rank is None else int(rank),
                        str(summary), max(since, _ts(a)), until if last == "firing" else min(until, max(_ts(b), _ts(a))))
                       for k, rule, sev, node, rank, summary, a, b, last, _ in rows[: limits.max_findings]]  # fmt: skip
    report.findings_left_out = len(rows) - len(report.findings)
    # the worst straggler cost of each evaluation, per kind, for GPU-hours lost
    costs = cur.execute("""SELECT kind, evaluated_at, max(cost) FROM straggler_finding_history
        WHERE cluster = ? AND evaluated_at BETWEEN ? AND ? AND cost IS NOT NULL
            AND hostname IN (SELECT DISTINCT hostname FROM report_summary) GROUP BY ALL ORDER BY 1, 2""",
                        [report.cluster, *span]).fetchall()  # fmt: skip
    report.gpu_hours = dict.fromkeys(CAUSES, 0.0)
    by_kind: dict[str, list[tuple[float, float]]] = {}
    for kind, at, cost in costs:
        by_kind.setdefault(str(kind), []).append((_ts(at), float(cost)))
    for kind, points in by_kind.items():
        gaps = [b[0] - a[0] for a, b in itertools.pairwise(points)]
        typical = statistics.median(gaps) if gaps else 0.0
        seconds = sum(
            cost * min(gap, 2 * typical) for (_, cost), gap in zip(points, [*gaps, typical], strict=True)
        )
        report.gpu_hours["straggler" if kind == "compute" else "degraded link"] += seconds
    gpus = report.coverage.ras_gpus or report.coverage.ranks_seen
    for cause in ("straggler", "degraded link"):
        report.gpu_hours[cause] *= gpus  # the whole job waits
    for (_, rule, _, _, _, _, a, b), held in zip(report.findings, [r[9] for r in rows], strict=False):
        if rule in HANG_RULES:  # the whole job stands still
            report.gpu_hours["hang"] += (b - a) * gpus
        elif rule in DEAD_RULES:  # its own GPUs do nothing; a job that stops waiting for it hangs (above)
            report.gpu_hours["dead rank"] += (b - a) * max(1, int(held or 1))


def _gpu_hours(report: JobReport) -> None:
    """GPU-seconds lost per cause (collected by :func:`_findings`) to GPU-hours, and the job's own."""
    gpus = report.coverage.ras_gpus or report.coverage.ranks_seen
    report.gpu_hours = {cause: round(seconds / 3600, 3) for cause, seconds in report.gpu_hours.items()}
    report.job_gpu_hours = round(report.coverage.duration_s * gpus / 3600, 3)


_GPU_METRICS = (("sclk_hz", "clock", "Hz"), ("power_w", "power", "W"),
                ("temperature_junction_c", "junction temperature", "C"), ("ecc_uncorrectable", "uncorrectable ECC", ""))  # fmt: skip


def _hardware(cur: duckdb.DuckDBPyConnection, report: JobReport, since: float, until: float) -> None:
    """The GPU and NIC samples of the nodes the findings name, each metric against its median over the job's nodes;
    the rows that differ by more than 10 % (or any ECC error, any NIC error rate)."""
    nodes = list(dict.fromkeys(node for _, _, _, node, *_ in report.findings if node))[:MAX_EVIDENCE_NODES]
    if not nodes:
        return
    span = [datetime.datetime.fromtimestamp(t, datetime.UTC).replace(tzinfo=None) for t in (since, until)]
    for column, label, unit in _GPU_METRICS:
        typical = cur.execute(f"""SELECT median({column}) FROM gpu WHERE cluster = ? AND recv_ts BETWEEN ? AND ?
            AND node IN (SELECT DISTINCT hostname FROM report_summary)""", [report.cluster, *span]).fetchone()  # fmt: skip
        rows = cur.execute(f"""SELECT node, "index", avg({column}) FROM gpu WHERE cluster = ? AND recv_ts BETWEEN ? AND ?
            AND node IN ({", ".join("?" * len(nodes))}) AND {column} IS NOT NULL GROUP BY ALL ORDER BY 1, 2""",
                           [report.cluster, *span, *nodes]).fetchall()  # fmt: skip
        base = float(typical[0]) if typical and typical[0] is not None else 0.0
        for node, index, value in rows:
            off = abs(value - base) > 0.1 * abs(base) if base else value > 0
            if off:
                report.hardware.append((str(node), f"GPU {index}", label, float(value), base, unit))
    nics = cur.execute(f"""SELECT node, name, avg(errors_per_s), avg(coalesce(tx_bps, 0) + coalesce(rx_bps, 0))
        FROM nic WHERE cluster = ? AND recv_ts BETWEEN ? AND ? AND node IN ({", ".join("?" * len(nodes))})
        GROUP BY ALL HAVING avg(errors_per_s) > 0 ORDER BY 3 DESC""", [report.cluster, *span, *nodes]).fetchall()  # fmt: skip
    report.hardware += [(str(n), f"NIC {name}", "errors", float(e), 0.0, "/s") for n, name, e, _ in nics]


def _links(cur: duckdb.DuckDBPyConnection, report: JobReport, since: float, until: float,
           limits: ReportSettings) -> None:  # fmt: skip
    span = [datetime.datetime.fromtimestamp(t, datetime.UTC).replace(tzinfo=None) for t in (since, until)]
    rows = cur.execute("""WITH l AS (SELECT src, dst, arg_max(least(coalesce(upload_bps, download_bps),
                coalesce(download_bps, upload_bps)), recv_ts) AS bps, arg_max(rtt_us, recv_ts) AS rtt
            FROM probe WHERE cluster = ? AND recv_ts BETWEEN ? AND ? AND error IS NULL
                AND src IN (SELECT DISTINCT hostname FROM report_summary) GROUP BY src, dst)
        SELECT src, dst, bps, rtt, count(*) OVER (), median(bps) OVER () FROM l ORDER BY bps NULLS LAST, src, dst
        LIMIT ?""", [report.cluster, *span, limits.max_links]).fetchall()  # fmt: skip
    report.links = [(str(s), str(d), None if b is None else b / 1e9, None if r is None else float(r))
                    for s, d, b, r, _, _ in rows]  # fmt: skip
    if rows:
        report.links_total = int(rows[0][4])
        report.link_median_gbps = None if rows[0][5] is None else rows[0][5] / 1e9
    nodes = sorted({n for s, d, *_ in report.links for n in (s, d)})
    report.link_nodes = nodes if len(nodes) <= MATRIX_NODES and report.links_total <= limits.max_links else []
