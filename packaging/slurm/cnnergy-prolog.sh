#!/bin/sh
# Slurm Prolog (slurm.conf: Prolog=/usr/share/cnnergy/slurm/cnnergy-prolog.sh): records which job holds
# each GPU of this node for `cnnergy exporter --job-map-dir`, one file per GPU index holding the job
# id. The matching Epilog (cnnergy-epilog.sh) removes them. Runs as root on the compute node.
dir="${CNNERGY_JOB_MAP_DIR:-/run/cnnergy-jobs}"
gpus="${SLURM_JOB_GPUS:-${CUDA_VISIBLE_DEVICES:-}}"
[ -n "$gpus" ] && [ -n "${SLURM_JOB_ID:-}" ] || exit 0
mkdir -p "$dir" && chmod 0755 "$dir" || exit 0
for g in $(echo "$gpus" | tr ',' ' '); do
  case "$g" in *[!0-9]*) continue ;; esac
  printf '%s\n' "$SLURM_JOB_ID" > "$dir/$g.tmp" && mv "$dir/$g.tmp" "$dir/$g"
done
exit 0
