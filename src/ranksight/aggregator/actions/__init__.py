"""Acting on findings (design §12, docs/actions.md): policies map firing alerts to actions, behind guard rails.

The flow, each part in its own module:

- :mod:`.planner` (pure, clock given): each tick it reads the firing alerts and the resolutions, and decides per policy
  and incident: nothing yet (too young, not confident or corroborated enough), ``planned`` (dry-run), ``awaiting_approval``,
  ``queued`` (enforce), ``skipped`` (cooldown, a node drained by someone else) or ``breaker_open`` (the circuit
  breaker's budget of nodes per window is spent). An incident is decided once: the action id hashes the policy, the
  alert's fingerprint and the time the incident started, and the ids already decided are reloaded at start.
- :mod:`.runner` (its own task, a bounded queue): writes every step to the ``action_audit`` table, claims the action in
  the alert KV bucket when aggregators are sharded (so a new analysis lead never repeats what the last one did), runs
  the executor with bounded retries and backoff, undoes on request or when the incident resolves. The tick only
  enqueues, so a slow or failing action never delays an alert or ingest.
- :mod:`.executors`: Slurm (scontrol), Kubernetes (API server), the nvidia-resiliency-ext exclusion file
  (:mod:`.nvrx`), a signed webhook, a command. Each raises :class:`~.model.ActionFailed` (worth retrying) or
  :class:`~.model.ActionRefused` (retrying cannot help: the node is drained by someone else, a 403).
- the Xid catalog's resolution classes (:mod:`aggregator.analysis.xid`) let policies on ``gpu_xid`` alerts pick by class.
"""
