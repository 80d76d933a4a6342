"""A finished job's history, written straight into a DuckDB file (a real :class:`~ranksight.aggregator.store.Store`,
its migrations and tables): what an aggregator would have stored while watching it, at any size, in seconds. For
the per-job report's tests, benchmark and screenshot (``ranksight report JOB --db FILE``).

The job: ``nodes`` x ``gpus`` ranks, a world communicator and one per node, one summary window per ``window_s``
(each rank's AllReduce count and kernel time as the agents summarize them), RAS polls listing every communicator, a
compute straggler (GPU ``SLOW[1]`` of node ``SLOW[0]``: a lower clock and power, the largest compute share since its
peers wait for it), a communication straggler and a degraded link probe from node ``SLOW_LINK``, a dead rank on the
last node and a short hang, each with the alerts and straggler evaluations the aggregator would have stored.
"""

from __future__ import annotations

from pathlib import Path

from ranksight.aggregator.store import Store
from ranksight.schemas.alerts import Alert

SLOW = (1, 2)  # node, GPU of the compute straggler
SLOW_LINK = 3  # node whose NIC and cross-node communicators are slow
STEP_S = 0.2
CLUSTER = "sim"


def host(node: int) -> str:
    return f"node{node:04d}"


def write_job_history(path: Path, job: str = "slurm-4242", nodes: int = 16, gpus: int = 8, windows: int = 30,
                      window_s: float = 10.0, start_s: float = 1_790_000_000.0) -> None:  # fmt: skip
    store = Store(path)
    store.open()
    try:
        _write(store, job, nodes, gpus, windows, window_s, start_s)
    finally:
        store.close_connection()
        store.shutdown()


def _write(
    store: Store, job: str, nodes: int, gpus: int, windows: int, window_s: float, start_s: float
) -> None:
    con = store.con
    ranks = nodes * gpus
    end_s = start_s + windows * window_s
    steps = round(window_s / STEP_S)
    w_us = int(window_s * 1e6)
    head = ("'{c}' AS cluster, {h} AS node, 'agent' AS agent, {seq} AS seq, make_timestamp(({t})::BIGINT) AS ts, "
            "make_timestamp(({t})::BIGINT) AS recv_ts, 30.0 AS ttl")  # fmt: skip
    # Inspector summaries: per window and rank, its world AllReduce and its node's AllReduce
    for comm, n_ranks, size, base_bw in (("world", ranks, 28, 150.0), ("node", gpus, 26, 300.0)):
        comm_id = "'0x1000'" if comm == "world" else "printf('0x%x', 8192 + r // " + str(gpus) + ")"
        name = "'world'" if comm == "world" else f"'tp-' || lpad((r // {gpus})::VARCHAR, 4, '0')"
        rank = "r" if comm == "world" else f"r % {gpus}"
        slow = f"(r // {gpus} = {SLOW[0]} AND r % {gpus} = {SLOW[1]})"
        crosses = f"(r // {gpus} = {SLOW_LINK})" if comm == "world" else "FALSE"
        con.execute(f"""INSERT INTO inspector_summary BY NAME SELECT
            {head.format(c=CLUSTER, h="'node' || lpad((r // " + str(gpus) + ")::VARCHAR, 4, '0')", seq="w",
                         t=f"({start_s} + (w + 1) * {window_s}) * 1e6")},
            ({start_s} + w * {window_s}) * 1e6 AS window_start_us, {w_us} AS window_us, {w_us // 10} AS slice_us,
            {comm_id} AS comm_id, {name} AS comm_name, {rank} AS rank, {n_ranks} AS n_ranks, {nodes} AS nnodes,
            'node' || lpad((r // {gpus})::VARCHAR, 4, '0') AS hostname, 40000 + r AS pid, 'coll' AS op_kind,
            'AllReduce' AS op, {size} AS size_bucket, 'ring' AS capture_model, {steps} AS count,
            {steps}::BIGINT * (1::BIGINT << {size}) AS bytes, {steps} AS timed,
            {steps} * (CASE WHEN {slow} THEN 20000 ELSE 80000 END + (hash(r, w) % 4000)) AS exec_sum_us,
            {base_bw} * CASE WHEN {crosses} THEN 0.55 ELSE 1 END * (0.97 + (hash(r, w) % 60) / 1000) AS busbw_gbs,
            w * {steps} AS sn_first, (w + 1) * {steps} - 1 AS sn_last,
            ({start_s} + (w + 1) * {window_s}) * 1e6 AS last_dump_ts_us
            FROM range({ranks}) t(r), range({windows}) u(w)""")  # fmt: skip
    hashes = ["0x1000", *(f"0x{8192 + n:x}" for n in range(nodes))]
    comms = ", ".join(f'{{"hash": "{h}", "size": {ranks if h == "0x1000" else gpus}}}' for h in hashes)
    con.execute(f"""INSERT INTO ras BY NAME SELECT {head.format(c=CLUSTER, h="'node0000'", seq="p",
                                                                t=f"({start_s} + p * 15) * 1e6")},
        '{job}' AS job_id, 'localhost:28028' AS endpoint, 'json' AS format, '2.29.3' AS version,
        CASE WHEN p * 15 BETWEEN {windows * window_s * 0.6} AND {windows * window_s * 0.8} THEN 'degraded' ELSE 'ok'
        END AS health, {nodes} AS nodes, {ranks} AS processes, {ranks} AS gpus, '[{comms}]' AS communicators
        FROM range({int(windows * window_s // 15) + 1}) t(p)""")  # fmt: skip
    con.execute(f"""INSERT INTO ras_event BY NAME SELECT {head.format(c=CLUSTER, h="'node0000'", seq="1",
                                                                      t=f"{end_s + 1} * 1e6")},
        '{job}' AS job_id, 'localhost:28028' AS endpoint, 'RANKSIGHT' AS event_group, 'ENDPOINT_CLOSED' AS event""")  # fmt: skip
    # GPU and NIC samples: three per device over the job
    con.execute(f"""INSERT INTO gpu BY NAME SELECT {head.format(c=CLUSTER, h="'node' || lpad(n::VARCHAR, 4, '0')",
                                                                seq="s", t=f"({start_s} + (s + 1) * {windows * window_s / 4}) * 1e6")},
        g AS "index", 'MI300X' AS name, 'amd' AS vendor, 'sysfs' AS source, 97.0 AS utilization_pct,
        CASE WHEN n = {SLOW[0]} AND g = {SLOW[1]} THEN 402.0 ELSE 712.0 END AS power_w, 58.0 AS temperature_edge_c,
        CASE WHEN n = {SLOW[0]} AND g = {SLOW[1]} THEN 71.0 ELSE 83.0 END AS temperature_junction_c,
        CASE WHEN n = {SLOW[0]} AND g = {SLOW[1]} THEN 1.3e9 ELSE 2.1e9 END AS sclk_hz, 0 AS ecc_uncorrectable,
        FALSE AS throttled FROM range({nodes}) a(n), range({gpus}) b(g), range(3) c(s)""")  # fmt: skip
    con.execute(f"""INSERT INTO nic BY NAME SELECT {head.format(c=CLUSTER, h="'node' || lpad(n::VARCHAR, 4, '0')",
                                                                seq="s", t=f"({start_s} + (s + 1) * {windows * window_s / 4}) * 1e6")},
        'mlx5_0/1' AS name, 'rdma' AS kind, 'ACTIVE' AS state, 4e11 AS speed_bps, 1.6e11 AS tx_bps, 1.6e11 AS rx_bps,
        CASE WHEN n = {SLOW_LINK} THEN 12.5 ELSE 0.0 END AS errors_per_s, 0 AS link_flaps
        FROM range({nodes}) a(n), range(3) c(s)""")  # fmt: skip
    con.execute(f"""INSERT INTO probe BY NAME SELECT {head.format(c=CLUSTER, h="'node' || lpad(n::VARCHAR, 4, '0')",
                                                                  seq="n", t=f"({start_s} + {window_s}) * 1e6")},
        'node' || lpad(n::VARCHAR, 4, '0') AS src, 'node' || lpad(((n + 1) % {nodes})::VARCHAR, 4, '0') AS dst,
        'tcp' AS transport, '10.0.0.1' AS dst_addr, 'full' AS mode, 25.0 AS rtt_us,
        CASE WHEN n = {SLOW_LINK} THEN 4e9 ELSE 4e10 END AS upload_bps,
        CASE WHEN n = {SLOW_LINK} THEN 4e9 ELSE 4e10 END AS download_bps
        FROM range({nodes}) a(n)""")  # fmt: skip
    # straggler evaluations every window from the second on; a communication finding in the middle third
    con.execute(f"""INSERT INTO straggler_finding_history BY NAME SELECT
        make_timestamp((({start_s} + (w + 1) * {window_s}) * 1e6)::BIGINT) AS evaluated_at, '{CLUSTER}' AS cluster,
        'ring' AS capture_model, 1000 AS records, 'node' || lpad({SLOW[0]}::VARCHAR, 4, '0') AS hostname,
        {40000 + SLOW[0] * gpus + SLOW[1]} AS pid, 'compute' AS kind, 'world' AS comm, {SLOW[0] * gpus + SLOW[1]} AS rank,
        1.6 AS slowdown, 0.9 AS confidence, 0.25 AS cost FROM range(1, {windows}) t(w)""")  # fmt: skip
    con.execute(f"""INSERT INTO straggler_finding_history BY NAME SELECT
        make_timestamp((({start_s} + (w + 1) * {window_s}) * 1e6)::BIGINT) AS evaluated_at, '{CLUSTER}' AS cluster,
        'ring' AS capture_model, 1000 AS records, '{host(SLOW_LINK)}' AS hostname, NULL AS pid,
        'communication' AS kind, 'world' AS comm, NULL AS rank, 1.3 AS slowdown, 0.8 AS confidence, 0.05 AS cost
        FROM range({windows // 3}, {2 * windows // 3}) t(w)""")  # fmt: skip
    iso = _iso
    last = host(nodes - 1)
    alerts = [
        ("straggler", "critical", host(SLOW[0]), SLOW[0] * gpus + SLOW[1], 0.1, 1.0,
         f"compute straggler on {host(SLOW[0])} pid {40000 + SLOW[0] * gpus + SLOW[1]}: collectives 1.60x slower"),
        ("nic_errors_rising", "warning", host(SLOW_LINK), None, 0.2, 0.9, f"{host(SLOW_LINK)} NIC mlx5_0/1 errors rising"),
        ("link_degraded", "warning", host(SLOW_LINK), None, 0.3, 0.7, f"link {host(SLOW_LINK)} -> {host(SLOW_LINK + 1)} "
         "at 4 Gbit/s, 10x below its peers"),
        ("rank_missing", "warning", last, (nodes - 1) * gpus + 5, 0.6, 0.8,
         f"job {job}: process {40000 + (nodes - 1) * gpus + 5} on {last} (GPU 5) is not answering"),
        ("comm_hang", "critical", None, None, 0.8, 0.83, f"job {job}: no collective advanced for 9 s"),
    ]  # fmt: skip
    span = end_s - start_s
    store.write_alerts([
        Alert(rule=rule, severity=sev, fingerprint=f"fp-{rule}", state=state, cluster=CLUSTER, node=node,  # type: ignore[arg-type]
              job=job, rank=rank, summary=summary, evidence={}, started_at=iso(start_s + a * span),
              updated_at=iso(start_s + (b if state == "resolved" else a) * span),
              resolved_at=iso(start_s + b * span) if state == "resolved" else None)
        for rule, sev, node, rank, a, b, summary in alerts for state in ("firing", "resolved")
    ])  # fmt: skip


def _iso(seconds: float) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
