#!/bin/sh
# Slurm prolog (runs on each node of a job as root): register the job with the local ranksight agent by writing
# /run/ranksight/jobs/<jobid>.env (job id, user, node list). Never fails the job: always exits 0.
trap 'exit 0' EXIT
dir="${RANKSIGHT_JOBS_DIR:-/run/ranksight/jobs}"
[ -n "$SLURM_JOB_ID" ] || exit 0
mkdir -p "$dir" 2>/dev/null || exit 0
tmp="$dir/.$SLURM_JOB_ID.$$"
{
  printf 'SLURM_JOB_ID=%s\n' "$SLURM_JOB_ID"
  printf 'SLURM_JOB_USER=%s\n' "${SLURM_JOB_USER:-}"
  printf 'SLURM_JOB_NODELIST=%s\n' "${SLURM_JOB_NODELIST:-}"
  printf 'STARTED=%s\n' "$(date +%s)"
} > "$tmp" 2>/dev/null && mv -f "$tmp" "$dir/$SLURM_JOB_ID.env" 2>/dev/null
rm -f "$tmp" 2>/dev/null
exit 0
