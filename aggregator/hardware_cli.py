"""``ranksight gpus`` and ``ranksight nics``: live GPU and NIC state from the running aggregator."""

from __future__ import annotations

from ranksight.aggregator.api.cli import SubParsers, add_query_command, given

GPU_COLUMNS = ["node", "index", "name", "utilization_pct", "memory_used_bytes", "memory_total_bytes", "power_w",
               "temperature_edge_c", "sclk_hz", "ecc_uncorrectable", "throttled", "freshness"]  # fmt: skip
NIC_COLUMNS = ["node", "name", "kind", "state", "speed_bps", "tx_bps", "rx_bps", "errors_per_s", "link_flaps",
               "freshness"]  # fmt: skip


def register(sub: SubParsers) -> None:
    for name, help, columns in (
        (
            "gpus",
            "live GPU state per node: utilization, memory, power, temperature, clocks, ECC",
            GPU_COLUMNS,
        ),
        ("nics", "live NIC state per node: link, speed, rates, errors, flaps", NIC_COLUMNS),
    ):
        p = add_query_command(sub, name, help, columns, params=lambda a: given(a, "cluster", "node"))
        p.add_argument("--cluster", help="only this cluster")
        p.add_argument("--node", help="only this node")
