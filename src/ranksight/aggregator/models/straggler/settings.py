"""The straggler engine's section: ``[aggregator.stragglers]``."""

from __future__ import annotations

from pydantic import Field, model_validator

from ranksight.core.config import Section


class StragglerSettings(Section):
    """Online straggler analysis (design §6); the same engine as ``ranksight analyze inspector``."""

    window_s: float = Field(
        6.0, gt=0, description="sliding evaluation horizon over the records' dump timestamps"
    )
    slice_s: float = Field(0.5, gt=0, description="records are summed per slice of dump time")
    judge_every_s: float = Field(
        1.0,
        gt=0,
        description="online, the horizon is judged at every this much dump time (rounded to whole slices; offline "
        "`analyze inspector` judges every slice): the engine's main cost at scale, halved from every 0.5 s slice "
        "with the same findings and alert times in benchmarks/diagnosis.py",
    )
    confirm_windows: int = Field(
        3, ge=1, description="most consecutive flagged evaluations a weak finding needs before it alerts"
    )
    evidence_z: float = Field(
        12.0,
        gt=0,
        description="summed robust z-score that confirms a finding (a strong one confirms at once)",
    )
    hiccup_chance: float = Field(
        1e-3,
        gt=0,
        le=1,
        description="a process whose excess compute comes in slow pools among quiet ones is reported only where that "
        "many slow pools would come by chance at most this often: at the rate its healthy peers' pools are as slow, "
        "times the processes compared (a noisy healthy job's hiccups clustering on one process for a few seconds are "
        "not a straggler; a steady one, or an intermittent one recurring over its remembered windows, is far rarer)",
    )
    catch_up_windows: int = Field(
        4,
        ge=1,
        description="records that arrive late (an agent reading its dumps behind, an aggregator catching up) are "
        "judged up to this many windows back; the engine keeps their slices, so memory grows with it (at 1024 nodes "
        "x 8 GPUs in benchmarks/scale.py about 1.6 MB per 0.5 s slice: a row of NumPy arrays per key)",
    )
    clock_ahead_s: float = Field(
        5.0,
        gt=0,
        description="records dumped further past the aggregator's clock are not judged (a host whose clock runs "
        "ahead: its processes would be the newest and the job's real slices judged stale); counted per cluster in "
        "the status's stragglers.ahead. Keep it under twice window_s",
    )
    sampled_max_window_s: float = Field(
        300.0,
        gt=0,
        description="sampled capture (2.28/2.29 plugins): the horizon holds 48 dump ticks (a weak straggler needs "
        "many single-slot samples) and spans at most this much dump time: 240 s at 5 s dumps; longer intervals get "
        "fewer ticks. The engine keeps rows only for the samples, so memory follows the ticks, not this span",
    )
    retain_windows: int = Field(
        6,
        ge=2,
        description="a cluster silent (by receipt time) this many windows is forgotten: its alerts resolve",
    )
    evaluate_every_s: float = Field(
        1.0,
        gt=0,
        description="how often the engine runs (on tick, never per message); each run judges the horizons completed "
        "since the last (judge_every_s), so a shorter period alerts sooner at little cost: from 2 s to 1 s, alerts "
        "1 s sooner for about a tenth more engine CPU in benchmarks/engine.py",
    )
    max_records: int = Field(
        2_000_000, ge=1000, description="records queued for the engine at most (beyond: dropped and counted)"
    )
    max_ranks: int = Field(
        1_000_000,
        ge=100,
        description="ranks followed at once: distinct (cluster, communicator, collective, host, pid) with records "
        "within hang_retain_s (and retain_windows x window_s); records of further ones are not analyzed, counted in "
        "the status's stragglers.untracked. Bounds what the engine and the hang finder keep against a peer naming new "
        "communicators or processes in every record (benchmarks/scale.py's 1024-node x 8-GPU job: 24,576)",
    )
    process: bool = Field(
        True,
        description="the aggregator runs the engine in a child process, started with the first Inspector records "
        "(its own interpreter lock: at a thousand nodes ingest alone fills a core); false: a thread, sharing it",
    )
    ingest_waits_at_records: int = Field(
        200_000,
        ge=1,
        description="records queued for the engine at which ingest stops fetching until the engine has taken them: "
        "an engine slower than the input makes the stream hold the backlog, not the aggregator's memory",
    )
    hang_quiet_s: float = Field(
        4.0,
        gt=0,
        description="a collective whose coll_sn stopped advancing this long (receipt time), with some ranks' last "
        "coll_sn behind their peers', is a hang (collective_hang)",
    )
    hang_retain_s: float = Field(
        600.0,
        gt=0,
        description="a hang silent this long is taken as a job that ended or was killed: it resolves",
    )

    @model_validator(mode="after")
    def _ingest_waits_before_dropping(self) -> StragglerSettings:
        if self.ingest_waits_at_records >= self.max_records:
            raise ValueError(
                "ingest_waits_at_records must be below max_records: a full queue drops records (processes "
                "then look idle) before ingest would wait for the engine"
            )
        return self
