#!/bin/sh
# Slurm Epilog (slurm.conf: Epilog=/usr/share/cnnergy/slurm/cnnergy-epilog.sh): removes the job-map files
# the prolog wrote for this job (only those still naming it), so the exporter drops the job label.
dir="${CNNERGY_JOB_MAP_DIR:-/run/cnnergy-jobs}"
[ -n "${SLURM_JOB_ID:-}" ] && [ -d "$dir" ] || exit 0
for f in "$dir"/*; do
  [ -f "$f" ] || continue
  [ "$(head -n 1 "$f")" = "$SLURM_JOB_ID" ] && rm -f "$f"
done
exit 0
