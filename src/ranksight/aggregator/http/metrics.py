"""``/metrics``: Prometheus text exposition, read from live state at scrape time.

A custom collector, not gauges updated on ingest: a fact that expired (a GPU, NIC or link whose TTL passed, a node that
is gone) is simply not emitted at the next scrape, so its series disappear. Names follow Prometheus rules: the
``ranksight_`` prefix, base units (seconds, bytes, ratios), ``_total`` counters. Cardinality is bounded per family
by ``aggregator.http.metrics_max_series``; what is left out is counted in ``ranksight_metrics_series_dropped``.

GPU, NIC and straggler series carry ``job_id``: the job running on that device (:mod:`aggregator.device_jobs`), empty
(which Prometheus treats as no label) on devices no job is known to use. Not ``job``, which Prometheus sets on every
scraped series (the scrape job) and would rename ours to ``exported_job``. Each device has at most one job, so the label
adds no series; GPUs also carry their ``uuid`` and ``model``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Histogram, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ranksight.aggregator.api.health import HEALTH_WORDS, job_health, nodes_health
from ranksight.aggregator.device_jobs import DeviceJobs, device_jobs
from ranksight.aggregator.state.devices import link_up

if TYPE_CHECKING:
    from ranksight.aggregator.http.events import LiveEvents
    from ranksight.aggregator.runtime import Aggregator

NODE_STATES = ("alive", "stale", "gone")
US = 1e-6


class _Families:
    """Metric families by name, each capped at ``max_series`` samples."""

    def __init__(self, max_series: int) -> None:
        self.max_series = max_series
        self.families: dict[str, GaugeMetricFamily | CounterMetricFamily] = {}
        self.dropped: Counter[str] = Counter()

    def gauge(self, name: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
        family = self.families.setdefault(name, GaugeMetricFamily(name, doc, labels=labels))
        assert isinstance(family, GaugeMetricFamily)
        return family

    def counter(self, name: str, doc: str, labels: list[str]) -> CounterMetricFamily:
        family = self.families.setdefault(name, CounterMetricFamily(name, doc, labels=labels))
        assert isinstance(family, CounterMetricFamily)
        return family

    def add(
        self, family: GaugeMetricFamily | CounterMetricFamily, labels: list[str], value: float | None
    ) -> None:
        if value is None:
            return  # an unsupported reading is no series, never a fake zero
        if len(family.samples) >= self.max_series:
            self.dropped[family.name] += 1
            return
        family.add_metric(labels, float(value))


class ClusterCollector(Collector):
    def __init__(self, agg: Aggregator, events: LiveEvents, max_series: int) -> None:
        self.agg = agg
        self.events = events
        self.max_series = max_series

    def collect(self) -> Iterator[Metric]:
        f = _Families(self.max_series)
        jobs = device_jobs(self.agg.state)
        self._self_metrics(f)
        self._nodes(f)
        self._hardware(f, jobs)
        self._links(f)
        self._jobs_and_stragglers(f, jobs)
        self._inspector_drops(f, jobs)
        yield from f.families.values()
        dropped = GaugeMetricFamily("ranksight_metrics_series_dropped",
                                    "series left out of the last scrape by the cardinality bound", labels=["family"])  # fmt: skip
        for name, n in sorted(f.dropped.items()):
            dropped.add_metric([name], n)
        yield dropped

    def _self_metrics(self, f: _Families) -> None:
        s, seq = self.agg.stats, self.agg.store.sequence_stats()
        counters: list[tuple[str, float, str]] = [
            ("ingest_messages", s.messages, "event messages ingested"),
            ("ingest_records", s.records, "records ingested"),
            ("ingest_batches", s.batches, "batches committed to DuckDB"),
            ("ingest_duplicates", s.duplicates, "redelivered or re-published messages ignored"),
            ("dead_letters", s.dead_letters, "malformed messages kept in dead_letters"),
            ("sequence_gaps", s.new_gaps, "per-agent sequence gaps found"),
            (
                "ingest_conflicts",
                s.conflicts,
                "same incarnation and seq with different content (dead-lettered)",
            ),
            ("ingest_state_skipped", s.state_skipped, "committed messages live state could not use"),
            ("replay_skipped", seq["replay_skipped"], "stored messages replay could not use at start"),
            ("events_published", self.events.published_total, "events published to /events clients"),
            (
                "events_clients_dropped",
                self.events.dropped_total,
                "/events clients dropped for being too slow",
            ),
        ]
        for name, value, doc in counters:
            f.add(f.counter(f"ranksight_{name}", doc, []), [], value)
        for name, value, doc in (
            (
                "ingest_lag_seconds",
                s.lag_s,
                "age of the newest message of the last batch when it was fetched",
            ),
            ("ingest_last_batch_messages", s.last_batch_size, "messages in the last committed batch"),
            ("ingest_last_commit_seconds", s.last_commit_s, "DuckDB commit time of the last batch"),
            ("sequence_gaps_open", seq["gaps_open"], "sequence gaps not filled yet"),
            ("agents", seq["agents"], "agent incarnations tracked"),
            ("nodes_tracked", seq["nodes"], "nodes with sequence state (bounded by ingest.max_nodes)"),
            (
                "sequence_jumps",
                seq["seq_jumps"],
                "seq jumps beyond ingest.max_seq_jump of the tracked incarnations",
            ),
            ("events_clients", len(self.events.clients), "/events clients connected"),
        ):
            f.add(f.gauge(f"ranksight_{name}", doc, []), [], value)
        refused = f.counter("ranksight_nats_permission_violations_total", "publishes and subscriptions the NATS server "
                            "refused this aggregator (its NATS user lacks the permission)", ["op", "subject"])  # fmt: skip
        for (op, subject), n in sorted(self.agg.nats_problems.violations.items()):
            f.add(refused, [op, subject], n)
        rule_errors = f.counter("ranksight_rule_errors_total", "rule evaluations that raised", ["rule"])
        for rule, n in sorted(self.agg.engine.rule_errors.items()):
            f.add(rule_errors, [rule], n)
        f.add(f.gauge("ranksight_problems", "problems status reports as errors now (refused subjects, partitions "
                      "no shard ingests)", []), [], len(self.agg.problems()))  # fmt: skip
        firing = f.gauge("ranksight_alerts_firing", "alerts firing now", ["cluster", "rule", "severity"])
        counts = Counter((a.cluster, a.rule, a.severity) for a in self.agg.engine.active.values())
        for labels, n in sorted(counts.items()):
            f.add(firing, list(labels), n)
        engine = self.agg.engine
        changes = f.counter("ranksight_alert_transitions_total", "alerts fired and resolved since the aggregator "
                            "started, by rule (a rule that flaps shows here)", ["cluster", "rule", "state"])  # fmt: skip
        for (cluster, rule, state), n in sorted(engine.transitions.items()):
            f.add(changes, [cluster, rule, state], n)
        for name, value, doc in (
            ("alerts_inhibited", len(engine.inhibited), "conditions held back by an inhibiting alert"),
            ("silences_active", len(engine.silences), "silences (maintenance windows) active or pending"),
            ("nodes_drained", len(engine.drained), "nodes drained (expected to be silent)"),
        ):
            f.add(f.gauge(f"ranksight_{name}", doc, []), [], value)
        pushes = f.counter("ranksight_alertmanager_events_total", "Alertmanager pushes by outcome "
                           "(alerts_sent, silences_sent, failures, dropped)", ["url", "event"])  # fmt: skip
        for target in self.agg.alertmanager.targets:
            for event, n in sorted(target.stats.items()):
                f.add(pushes, [target.url, event], n)

    def _nodes(self, f: _Families) -> None:
        nodes = self.agg.state.nodes.nodes.values()
        by_state = f.gauge("ranksight_nodes", "nodes by state", ["cluster", "state"])
        counts: Counter[tuple[str, str]] = Counter((n.cluster, n.state) for n in nodes)
        for cluster in sorted({n.cluster for n in nodes}):
            for state in NODE_STATES:
                f.add(by_state, [cluster, state], counts[(cluster, state)])
        up = f.gauge("ranksight_node_up", "1 alive, 0 stale (gone nodes have no series)", ["cluster", "node"])
        skew = f.gauge(
            "ranksight_node_clock_skew_seconds", "agent clock minus receipt time", ["cluster", "node"]
        )
        health = f.gauge("ranksight_node_health", "1 for the node's health word (ok, warning, critical), 0 for the "
                         "others: the vocabulary of status, nodes and the web page", ["cluster", "node", "health"])  # fmt: skip
        healths = nodes_health(self.agg.state, self.agg.engine.active.values(), self.agg.engine.drained)
        for n in sorted(nodes, key=lambda n: (n.cluster, n.node)):
            if n.state != "gone":
                f.add(up, [n.cluster, n.node], n.state == "alive")
                f.add(skew, [n.cluster, n.node], n.clock_skew_s)
            _, word = healths[(n.cluster, n.node)]
            for each in HEALTH_WORDS:
                f.add(health, [n.cluster, n.node, each], int(each == word))

    def _hardware(self, f: _Families, jobs: DeviceJobs) -> None:
        state = self.agg.state
        gpu_labels = ["cluster", "node", "gpu", "uuid", "model", "job_id"]
        util = f.gauge("ranksight_gpu_utilization_ratio", "GPU busy share (0-1)", gpu_labels)
        mem = f.gauge("ranksight_gpu_memory_used_bytes", "GPU memory in use", gpu_labels)
        mem_total = f.gauge("ranksight_gpu_memory_total_bytes", "GPU memory size", gpu_labels)
        power = f.gauge("ranksight_gpu_power_watts", "GPU power draw", gpu_labels)
        temp = f.gauge(
            "ranksight_gpu_temperature_celsius", "GPU temperature by sensor", [*gpu_labels, "sensor"]
        )
        clock = f.gauge("ranksight_gpu_clock_hertz", "GPU shader clock", gpu_labels)
        throttled = f.gauge("ranksight_gpu_throttled", "1 while the GPU is throttled", gpu_labels)
        ecc = f.counter("ranksight_gpu_ecc_uncorrectable_errors", "uncorrectable ECC errors", gpu_labels)
        for (cluster, node, key), dev in sorted(state.gpus.devices.items()):
            if dev.state != "alive":
                continue  # expired facts have no series
            g = dev.record
            labels = [cluster, node, key, g.uuid or "", g.name or "", jobs.gpu(cluster, node, g.index)]
            f.add(util, labels, None if g.utilization_pct is None else g.utilization_pct / 100)
            f.add(mem, labels, g.memory_used_bytes)
            f.add(mem_total, labels, g.memory_total_bytes)
            f.add(power, labels, g.power_w)
            for sensor, value in (("edge", g.temperature_edge_c), ("junction", g.temperature_junction_c),
                                  ("memory", g.temperature_memory_c)):  # fmt: skip
                f.add(temp, [*labels, sensor], value)
            f.add(clock, labels, g.sclk_hz)
            f.add(throttled, labels, None if g.throttled is None else int(g.throttled))
            f.add(ecc, labels, g.ecc_uncorrectable)
        nic_labels = ["cluster", "node", "nic", "kind", "job_id"]
        nic_up = f.gauge("ranksight_nic_up", "1 when the port or netdev is up", nic_labels)
        speed = f.gauge("ranksight_nic_speed_bytes_per_second", "link speed", nic_labels)
        tx = f.gauge("ranksight_nic_transmit_bytes_per_second", "transmit rate", nic_labels)
        rx = f.gauge("ranksight_nic_receive_bytes_per_second", "receive rate", nic_labels)
        errors = f.gauge("ranksight_nic_errors_per_second", "error counters' rate", nic_labels)
        congestion = f.gauge("ranksight_nic_congestion_events_per_second", "CNP/ECN rate", nic_labels)
        for (cluster, node, key), nic in sorted(state.nics.devices.items()):
            if nic.state != "alive":
                continue
            r, labels = nic.record, [cluster, node, key, nic.record.kind, jobs.node(cluster, node)]
            f.add(nic_up, labels, None if r.state is None else int(link_up(r)))
            f.add(speed, labels, None if r.speed_bps is None else r.speed_bps / 8)
            f.add(tx, labels, None if r.tx_bps is None else r.tx_bps / 8)
            f.add(rx, labels, None if r.rx_bps is None else r.rx_bps / 8)
            f.add(errors, labels, r.errors_per_s)
            f.add(congestion, labels, r.congestion_per_s)

    def _links(self, f: _Families) -> None:
        labels = ["cluster", "src", "dst", "transport", "dst_addr"]
        up = f.gauge("ranksight_link_upload_bytes_per_second", "measured src -> dst rate", labels)
        down = f.gauge("ranksight_link_download_bytes_per_second", "measured dst -> src rate", labels)
        rtt = f.gauge("ranksight_link_rtt_seconds", "median round-trip time", labels)
        jitter = f.gauge("ranksight_link_jitter_seconds", "mean successive RTT difference", labels)
        for key, link in sorted(self.agg.state.links.links.items()):
            if not link.fresh:
                continue
            r, values = link.record, list(key)
            f.add(up, values, None if r.upload_bps is None else r.upload_bps / 8)
            f.add(down, values, None if r.download_bps is None else r.download_bps / 8)
            f.add(rtt, values, None if r.rtt_us is None else r.rtt_us * US)
            f.add(jitter, values, None if r.jitter_us is None else r.jitter_us * US)

    def _jobs_and_stragglers(self, f: _Families, jobs: DeviceJobs) -> None:
        labels = ["cluster", "job", "job_id"]  # job_id: the same, under the name the device series use
        ranks = f.gauge("ranksight_job_ranks", "ranks of a running job", labels)
        dead = f.gauge("ranksight_job_dead_processes", "processes RAS reports dead", labels)
        missing = f.gauge("ranksight_job_missing_processes", "processes RAS cannot reach", labels)
        health = f.gauge("ranksight_job_health", "1 for the running job's health word, 0 for the others",
                         [*labels, "health"])  # fmt: skip
        for job in self.agg.state.jobs.live():
            values = [job.cluster, job.job_id, job.job_id]
            if (word := job_health(job.health)) is not None:
                for each in HEALTH_WORDS:
                    f.add(health, [*values, each], int(each == word))
            f.add(ranks, values, job.ranks)
            f.add(dead, values, len(job.dead_processes))
            f.add(missing, values, len(job.missing_processes))
        slabels = ["cluster", "hostname", "pid", "rank", "kind", "job_id"]
        slowdown = f.gauge(
            "ranksight_straggler_slowdown_ratio", "job time with / without the straggler", slabels
        )
        confidence = f.gauge(
            "ranksight_straggler_confidence_ratio", "confidence of the finding (0-1)", slabels
        )
        for cluster, result in sorted(self.agg.state.stragglers.clusters.items()):
            for finding in result.findings:
                job_id = jobs.process(cluster, finding.hostname, finding.pid)
                values = [
                    cluster,
                    finding.hostname,
                    str(finding.pid),
                    str(finding.rank),
                    finding.kind,
                    job_id,
                ]
                f.add(slowdown, values, finding.slowdown)
                f.add(confidence, values, finding.confidence)

    def _inspector_drops(self, f: _Families, jobs: DeviceJobs) -> None:
        """Inspector v4.1+ dump markers: the plugin's ring drop counters (since the process started) per process and
        communicator, and the records the markers announced."""
        labels = ["cluster", "node", "hostname", "pid", "comm", "comm_name", "job_id"]
        dropped = f.counter("ranksight_inspector_dropped_operations", "completed operations the Inspector plugin's "
                            "rings dropped, never dumped (op_kind: coll, p2p, proxy; v4.4: proxy_op lost outside the "
                            "ring, proxy_step overwritten)", [*labels, "op_kind"])  # fmt: skip
        dumped = f.counter("ranksight_inspector_dumped_records",
                           "coll and p2p records the Inspector dump markers seen announced", labels)  # fmt: skip
        for (cluster, node, host, pid, comm), state in sorted(self.agg.state.inspector_drops.live().items()):
            rec = state.latest
            values = [
                cluster,
                node,
                host,
                str(pid),
                comm,
                rec.comm_name or "",
                jobs.process(cluster, node, pid),
            ]
            f.add(dropped, [*values, "coll"], rec.coll_dropped_total)
            f.add(dropped, [*values, "p2p"], rec.p2p_dropped_total)
            # None (no series) without proxy tracing, or before v4.4 for the last two
            f.add(dropped, [*values, "proxy"], rec.proxy_dropped_total)
            f.add(dropped, [*values, "proxy_op"], rec.proxy_ops_dropped_total)
            f.add(dropped, [*values, "proxy_step"], rec.proxy_steps_overwritten_total)
            f.add(dumped, values, state.records)
        glabels = ["cluster", "node", "hostname", "gpu", "job_id", "op_kind"]
        gpu_dropped = f.counter("ranksight_inspector_gpu_dropped_operations", "operations the Inspector plugin's "
                                "rings of one GPU dropped (its Prometheus textfile or OTLP counters)", glabels)  # fmt: skip
        gpu_total = f.counter("ranksight_inspector_gpu_operations", "operations the Inspector plugin's rings of one GPU "
                              "recorded (its Prometheus textfile or OTLP counters)", glabels)  # fmt: skip
        for (cluster, node, host, gpu), drops in sorted(self.agg.state.inspector_drops.live_gpus().items()):
            counters, job_id = drops.latest, jobs.node(cluster, node)
            for op_kind, total, lost in (("coll", counters.coll_total, counters.coll_dropped_total),
                                         ("p2p", counters.p2p_total, counters.p2p_dropped_total)):  # fmt: skip
                values = [cluster, node, host, gpu, job_id, op_kind]
                f.add(gpu_total, values, total)
                f.add(gpu_dropped, values, lost)


def metrics_registry(
    agg: Aggregator, events: LiveEvents, max_series: int
) -> tuple[CollectorRegistry, Histogram]:
    """A registry of its own (not the process-global one: several aggregators may run in one test process)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ClusterCollector(agg, events, max_series))
    # the aggregator process's own CPU, memory and open files (prometheus_client's process collector, read from
    # /proc at scrape time): ranksight_process_resident_memory_bytes, ranksight_process_cpu_seconds_total...
    ProcessCollector(namespace="ranksight", registry=registry)
    latency = Histogram("ranksight_query_duration_seconds", "HTTP query endpoint latency", ["endpoint"],
                        registry=registry)  # fmt: skip
    return registry, latency
