"""The sections of the aggregator's one-module components: the probe planner (``[aggregator.probes]``), raw evidence,
hang forensics, the hardware and RAS alert rules, alert timings and Alertmanager (``[aggregator.alerts]``), shards,
profiling on demand and reports. Apart from :mod:`ranksight.aggregator.settings`, which composes every section of the
aggregator: these modules read their own section, not the whole.
"""

from __future__ import annotations

import socket
from pathlib import Path

from pydantic import Field

from ranksight.core.config import Section
from ranksight.schemas.subjects import sanitize_token


class ProbePlannerSettings(Section):
    enabled: bool = True
    round_pause_s: float = Field(1.0, ge=0, description="pause between probe rounds")
    full_mesh_max_nodes: int = Field(
        16, ge=2, description="above this many nodes, probe a sampled set of pairs"
    )
    random_pairs: int = Field(4, ge=0, description="random pairs added to the sampled set each round")
    echo_count: int = Field(50, ge=1, le=1000, description="small echoes per RTT measurement")
    bytes: int = Field(64 * 1024**2, ge=1, description="byte budget per direction of a full probe")
    seconds: float = Field(1.0, gt=0, le=30, description="time budget per direction of a full probe")
    command_timeout_s: float = Field(30.0, gt=0)
    job_hold_s: float = Field(
        60.0,
        ge=0,
        description="a node with job data (RAS, Inspector) this recently still runs a job: light probes only",
    )
    degraded_ratio: float = Field(
        0.5,
        gt=0,
        lt=1,
        description="link_degraded: bandwidth below this share of its history or of comparable links",
    )
    history: int = Field(20, ge=2, description="measurements kept per link for its own baseline")
    min_history: int = Field(
        3, ge=1, description="earlier measurements needed before comparing a link to itself"
    )
    comparable_window_s: float = Field(
        120.0, gt=0, description="link_degraded: peers count as comparable when measured this close in time"
    )
    degraded_confirm: int = Field(
        2,
        ge=1,
        description="link_degraded: measurements in a row that must all be low (fewer while a link has fewer)",
    )
    max_stall_share: float = Field(
        0.3,
        ge=0,
        le=1,
        description="link_degraded: a measurement with either end's probe loop stalled (busy or starved of CPU) "
        "longer than this share of it measured the host, not the link: not compared",
    )


class RawEvidenceSettings(Section):
    """Raw Inspector records on a finding: the aggregator asks the involved agents (``inspector_raw``) for the raw
    records of the affected comms and window and writes them into history (``aggregator.raw_evidence``)."""

    enabled: bool = True
    rules: list[str] = Field(
        default_factory=lambda: ["straggler", "collective_hang", "comm_hang"],
        description="the alerts whose firing asks for raw records",
    )
    lookback_s: float = Field(
        30.0, gt=0, description="window: from this long before the alert fired (dump time)"
    )
    lookahead_s: float = Field(
        5.0, ge=0, description="window: to this long after it fired (clock skew margin)"
    )
    max_records_per_finding: int = Field(20_000, ge=1, description="records fetched per finding at most")
    max_nodes_per_finding: int = Field(
        64, ge=1, description="agents asked per finding at most (its own node first)"
    )
    max_concurrent_requests: int = Field(
        8, ge=1, description="agent requests in flight at once, all findings"
    )
    max_pending_findings: int = Field(
        64, ge=1, description="findings waiting for their records (beyond: not asked)"
    )
    page_records: int = Field(2000, ge=1, description="records asked per page (the agent caps it too)")
    max_pages_per_node: int = Field(
        1000,
        ge=1,
        description="pages asked of one agent per finding at most (a page scans a bounded part of its files)",
    )
    request_timeout_s: float = Field(5.0, gt=0)
    retries: int = Field(2, ge=0, description="retries of a page whose agent did not answer")
    retry_delay_s: float = Field(1.0, ge=0)


class HangForensicsSettings(Section):
    """Hang forensics (``aggregator.hang_forensics``): when a hang alert of ``rules`` fires for a job, the aggregator asks
    the agents of the job's nodes for every process's Flight Recorder and Python stacks (``hang_dump``), matches them
    across ranks and names the rank that never arrived, its op and its frame: in the same hang's ``comm_hang`` /
    ``collective_hang`` alert (``evidence.flight_recorder``) when there is one, else as ``flight_recorder_hang``."""

    enabled: bool = True
    rules: list[str] = Field(
        default_factory=lambda: [
            "collective_hang",
            "comm_hang",
            "rank_heartbeat_overdue",
            "rank_section_overdue",
        ],
        description="the alerts whose firing asks the job's agents for dumps",
    )
    request_timeout_s: float = Field(
        20.0,
        gt=0,
        description="how long one agent's hang_dump answer may take (its processes answer within "
        "agent.collectors.app.dump_timeout_s)",
    )
    max_nodes_per_job: int = Field(256, ge=1, description="agents asked per job at most")
    max_concurrent_requests: int = Field(8, ge=1, description="agent requests in flight at once, all jobs")
    cooldown_s: float = Field(
        60.0, ge=0, description="a job is dumped again on a new alert only this long after its previous dump"
    )
    min_wait_s: float = Field(
        2.0,
        ge=0,
        description="a rank behind its peers is named only once the peers waited this long in the op (dumps of a "
        "healthy job, taken a moment apart, may catch one rank an op ahead)",
    )
    retain_s: float = Field(
        1800.0, gt=0, description="a job's hang report is kept (and its alert firing) at most this long"
    )
    max_named_ranks: int = Field(
        64,
        ge=1,
        description="ranks one hang report names one by one (a flight_recorder_hang alert, a job dump row, an entry "
        "of the RAS / Inspector alert's evidence each), and the most ranks any list in that evidence holds; the rest "
        "are counted (ranks_not_named, totals)",
    )


class HardwareAlertSettings(Section):
    """Thresholds of the GPU and NIC alerts, and the live NIC state's bound (``aggregator.hardware``)."""

    gpu_throttled_for_s: float = Field(30.0, gt=0, description="a GPU must stay throttled this long to alert")
    gpu_edge_c: float = Field(90.0, gt=0, description="edge (NVIDIA: GPU core) temperature that alerts")
    gpu_junction_c: float = Field(105.0, gt=0, description="junction (hotspot) temperature that alerts")
    gpu_memory_c: float = Field(95.0, gt=0, description="memory (HBM) temperature that alerts")
    nic_flaps: int = Field(3, ge=1, description="link transitions within the window that alert")
    nic_flap_window_s: float = Field(300.0, gt=0, description="window the flaps are counted over")
    nic_errors_per_s: float = Field(1.0, gt=0, description="error counter increase rate that alerts")
    nic_errors_window_s: float = Field(
        60.0, gt=0, description="the error rate is averaged over this window (a stable rate, not one sample)"
    )
    nic_congestion_per_s: float = Field(1000.0, gt=0, description="CNP/ECN rate that alerts when sustained")
    nic_congestion_for_s: float = Field(30.0, gt=0, description="how long congestion must last to alert")
    nic_max_counters: int = Field(
        4096,
        ge=1,
        description="counters a live port keeps at most from records of changed counters added up (an ionic port "
        "has about 600); a record that would pass it stands alone, its counters marked incomplete",
    )


class RasAlertSettings(Section):
    """The RAS alerts (``aggregator.ras``)."""

    hang_after_s: float = Field(
        120.0, gt=0, description="comm_hang: no op count of the job advanced for this long while it is alive"
    )
    peer_dead_confirm_polls: int = Field(
        2,
        ge=1,
        description="a MONITOR PEER_DEAD alerts at once; statuses after it that do not list the process "
        "withdraw it after this many",
    )


class RuleTiming(Section):
    """Overrides of one rule's hold-down (Prometheus ``for`` / ``keep_firing_for``); an unset field keeps the default
    the rule declares (its ``for_s``, ``clear_s``)."""

    for_s: float | None = Field(None, ge=0, description="the condition must hold this long before it fires")
    clear_s: float | None = Field(
        None, ge=0, description="a firing alert resolves only after its condition was absent this long"
    )


class AlertmanagerSettings(Section):
    """Pushing alerts to Prometheus Alertmanager (``aggregator.alerts.alertmanager``)."""

    urls: list[str] = Field(
        default_factory=list, description="Alertmanager base URLs, e.g. http://am:9093; empty: no push"
    )
    resend_s: float = Field(
        60.0, gt=0, description="firing alerts are re-sent this often (Prometheus' resend cadence)"
    )
    timeout_s: float = Field(10.0, gt=0, description="limit for one request to an Alertmanager")
    max_attempts: int = Field(
        20, ge=1, description="tries for one resolution or silence before it is given up (and logged)"
    )
    max_pending: int = Field(
        10_000, ge=1, description="resolutions and silence changes queued per Alertmanager while it is down"
    )
    page_url: str | None = Field(
        None, description="the web page's address for alert links; default: the aggregator's HTTP address"
    )


class AlertSettings(Section):
    """The alert engine (``aggregator.alerts``): hold-down per rule, inhibition, Alertmanager."""

    rules: dict[str, RuleTiming] = Field(
        default_factory=dict,
        description="per rule name, e.g. {nic_errors_rising = {for_s = 60}}; the aggregator refuses to start on a "
        "name it does not know",
    )
    inhibit: bool = Field(True, description="a silent or drained node suppresses the alerts it explains")
    max_ingest_behind_s: float = Field(
        10.0,
        gt=0,
        description="while ingest is further behind its stream, rules that judge silence (node_silent, comm_hang, "
        "collective_hang, rank_*_overdue) raise nothing: the silence would be the aggregator's own lag",
    )
    max_silences: int = Field(1000, ge=1, description="active silences at most")
    alertmanager: AlertmanagerSettings = AlertmanagerSettings()

    def timing(self, rule: str, default: tuple[float, float]) -> tuple[float, float]:
        """(for_s, clear_s) of ``rule``: its override, else ``default`` (what the rule declares). The aggregator
        refuses an override of a rule it does not know (:func:`ranksight.aggregator.rulebook.check_rule_names`)."""
        default_for, default_clear = default
        own = self.rules.get(rule, RuleTiming())
        return (
            default_for if own.for_s is None else own.for_s,
            default_clear if own.clear_s is None else own.clear_s,
        )


class ShardSettings(Section):
    """Sharded aggregators (design §9): the event stream is split into ``partitions`` by NATS (a subject transform
    hashing cluster and node); each aggregator holds some partitions through JetStream KV leases."""

    partitions: int = Field(
        0,
        ge=0,
        le=1024,
        description="partitions of the event stream; 0 = not sharded (one aggregator ingests everything)",
    )
    shard_id: str = Field(
        "",
        pattern=r"^[A-Za-z0-9_-]{0,64}$",
        description="this aggregator's name among the shards (stable across restarts: it names its leases and "
        "its durable state); empty = the host name",
    )
    lease_ttl_s: float = Field(
        15.0,
        gt=0,
        description="a partition or the analysis lead whose holder stops renewing is free after this",
    )
    bucket: str = Field(
        "ranksight_shards",
        pattern=r"^[A-Za-z0-9_-]+$",
        description="JetStream KV bucket of the partition leases, the analysis lead and the shard membership",
    )
    export_dir: Path | None = Field(
        None,
        description="a directory every shard can write and the query hosts can read (shared file system): each "
        "shard exports its history there as Parquet, <dir>/<table>/shard=<id>/day=.../, for SQL across shards "
        "(ranksight sql --shards); unset = no scheduled export",
    )
    export_interval_s: float = Field(
        300.0,
        gt=0,
        description="how often each shard exports (SQL across shards is at most this much behind)",
    )
    query_deadline_s: float = Field(
        2.0,
        gt=0,
        description="the query front waits this long for every shard; later answers make a partial result",
    )
    alerts_bucket: str = Field(
        "ranksight_alerts",
        pattern=r"^[A-Za-z0-9_-]+$",
        description="JetStream KV bucket (no TTL) of the analysis lead's alert state: firing and pending alerts, "
        "silences, drains; a new lead loads it before its first evaluation, so a failover re-fires nothing",
    )
    alerts_bucket_max_bytes: int = Field(
        256 * 1024**2, gt=0, description="size limit of the alert state bucket"
    )

    def name(self) -> str:
        """This shard's id: ``shard_id``, else the host name made a subject token."""
        return self.shard_id or sanitize_token(socket.gethostname())


class ProfileOnDemandSettings(Section):
    """Profiling on demand (``aggregator.profile_on_demand``): when an alert of ``rules`` fires for a job whose NCCL
    has RAS CONTROL (2.31+), ask the agent polling the job to turn the profiler events on (``ras_profile``, which the
    agent accepts only with ``agent.collectors.ras.profile_control``), and off again ``on_s`` later. Off by default."""

    enabled: bool = False
    rules: list[str] = Field(
        default_factory=lambda: [
            "comm_mismatch",
            "comm_hang",
            "ras_diag_nvlink",
            "ras_diag_xid",
            "ras_diag_ecc",
        ],
        description="the alerts (with a job) whose firing turns profiling on for their job",
    )
    value: str = Field("on", description="what is sent: on (Inspector's events), or a profiler mask")
    on_s: float = Field(300.0, gt=0, le=86400, description="profiling is turned off again this long after")
    max_jobs: int = Field(
        4, ge=1, description="jobs profiled at once at most (beyond: not turned on, counted)"
    )
    timeout_s: float = Field(30.0, gt=0, description="limit of one agent request")


class ReportSettings(Section):
    """Per-job reports (``ranksight report JOB``, ``/reports/<job>.html``, written at each job's end): one
    self-contained HTML file, bounded whatever the job's size."""

    on_job_end: bool = Field(True, description="write <state_dir>/reports/<job>.html when a job ends")
    max_ranks: int = Field(
        16_384, ge=1, description="ranks in the compute-share heatmap; beyond, the report says so"
    )
    max_points: int = Field(120, ge=10, description="time buckets of the step-time chart")
    max_comms: int = Field(
        64, ge=1, description="communicators in the bus-bandwidth chart (the slowest first)"
    )
    max_findings: int = Field(500, ge=1, description="alerts and straggler runs on the findings timeline")
    max_links: int = Field(200, ge=1, description="links listed in the link map (the slowest first)")
    max_reports: int = Field(
        200, ge=1, description="report files kept in <state_dir>/reports (the oldest go)"
    )
