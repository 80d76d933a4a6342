#!/bin/sh
# Slurm epilog: unregister the job registered by prolog.sh. Never fails the job: always exits 0.
trap 'exit 0' EXIT
dir="${RANKSIGHT_JOBS_DIR:-/run/ranksight/jobs}"
[ -n "$SLURM_JOB_ID" ] && rm -f "$dir/$SLURM_JOB_ID.env" 2>/dev/null
# A node Slurm is draining (maintenance, reboot) is expected to go silent: drain it in ranksight too, so its silence
# raises no alert. `ranksight node drain NODE --undrain` (or the resume script) puts it back. The command needs a
# config allowed to call the query API (RANKSIGHT_CONFIG, e.g. the operator user of deploy/nats/nats-server.conf).
node="${RANKSIGHT_NODE:-$(hostname)}"
state=$(scontrol show node "${SLURMD_NODENAME:-$node}" 2>/dev/null | sed -n 's/.* State=\([^ ]*\).*/\1/p')
case "$state" in
  *DRAIN*) timeout 15 "${RANKSIGHT_BIN:-ranksight}" node drain "$node" \
             --reason "Slurm drains ${SLURMD_NODENAME:-$node} (epilog of job ${SLURM_JOB_ID:-?})" >/dev/null 2>&1 ;;
esac
exit 0
