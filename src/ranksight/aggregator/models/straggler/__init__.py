"""The one straggler engine (design §6): pure, incremental, used online by the aggregator and offline by
``ranksight analyze``.

Why not "the rank with the lowest bandwidth": a rank's ``exec_time`` includes its wait for the last rank to arrive, so a
late rank (compute straggler) shows the *shortest* time of its group while its peers look slow.

Inputs are per-slice aggregates (``slice_s`` of dump time): per (comm, coll, size, rank) the count, sum and minimum of
exec times, and the span of ``coll_sn`` seen. Records are folded into them once (:meth:`add`), so the engine never
re-reads a record; the agents' per-window summaries (``inspector_summary``) carry the same aggregates per slice and feed
them in with :meth:`StragglerEngine.add_summary`.

1. Compute. Every process runs the same steps, so over a stretch of time its time *outside* collectives (its compute
   share, ``1 - sum(exec time x op rate)``) is its own compute: a victim's waits and a slow link's transfers show up
   inside its collectives, not outside them. A process whose compute share is well above the job's median is a compute
   straggler; the ratio is its slowdown (its compute between collectives against its peers'), the difference the share
   of the job's time it costs. Propagation cannot create one: a late rank's victims have *less* time outside collectives.
   Ring records give exact op counts; sampled records give the mean exec time of each (comm, coll, rank) and the op rate
   from the ``coll_sn`` span, in both cases per process and time window.
2. Communication. The transfer time of a comm is its shortest exec time (the last arriver waits for nobody), turned
   into bus bandwidth. A cross-node comm whose bandwidth is well below comms of the same shape, or its own best in the
   retained past, is slow; the nodes common to the slow comms and absent from the fast ones are the culprits.
3. Sliding evaluation. Every completed slice, the last ``window_s`` of slices is judged. A candidate is confirmed by
   the strength of its evidence: the robust z-scores of consecutive flagged evaluations add up to ``evidence_z`` (a
   strong straggler confirms at once, a weak one within ``confirm_windows`` evaluations); it resolves when it is no
   longer flagged. A rank slow in bursts shows as slices with and without excess: its duty cycle, burst slowdown and
   average cost are reported.

How it is held (a thousand nodes x 8 GPUs is some 25,000 (comm, coll, size, rank) keys in every slice): keys are
numbered, and a slice is a few NumPy arrays, one row per key number (its count, sum and minimum of exec times, and its
``coll_sn`` span with the dump times that bound it), about 1.5 MB at that size. Folding a record or a summary appends
its rows to a ledger (Python arrays, a few appends per summary); each evaluation first merges the ledger into its slices
(sorted and reduced per key in C), then judges horizons by concatenating their slices and grouping the rows by process,
communicator or key number (``bincount`` and ``ufunc.at``), never by a Python loop over keys.
"""
