#!/usr/bin/env bash
# The convolution study on a lent GPU (after `source scripts/device_env.sh`): convbench's in-process CUPTI counters
# cross-checked against Nsight Compute on the same cells (ResNet-50's 56x56 3x3 convolution at batch
# 128: cuDNN's implicit_gemm and our own direct kernel, each one kernel per call), written to $OUT.
# Reads counters only; ncu runs with --clock-control none (the GPU's clocks are left alone).
set -u
OUT=${OUT:-/tmp/cnnergy_out}
mkdir -p "$OUT"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1 || true)
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64:/usr/local/cuda/extras/CUPTI/lib64
PROBLEM=${PROBLEM:-n=128,c=64,h=56,w=56,k=64,r=3,s=3,pad=1}
METRICS=sm__warps_active.avg.pct_of_peak_sustained_active,sm__inst_executed.avg.per_cycle_active,dram__bytes_read.sum,dram__bytes_write.sum,smsp__inst_executed.sum,smsp__thread_inst_executed.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum
for impl in implicit_gemm own:direct; do
  tag=${impl//:/_}
  echo "== ours, in-process: $impl forward fp32 $PROBLEM"
  cnnergy convbench --problem "$PROBLEM" --impl "$impl" --direction forward --precision fp32 --calls 3 \
    --window-s 0 --transfers off --metrics full --json "$OUT/xcheck_${tag}_ours.json" 2>&1 | tail -8
  if [ -n "$NCU" ]; then
    echo "== Nsight Compute ($NCU): $impl forward fp32, every kernel of the run (its counters are per kernel)"
    "$NCU" --clock-control none --cache-control none --metrics "$METRICS" --csv \
      cnnergy convbench --problem "$PROBLEM" --impl "$impl" --direction forward --precision fp32 --calls 3 \
      --window-s 0 --transfers off --metrics off > "$OUT/xcheck_${tag}_ncu.csv" 2> "$OUT/xcheck_${tag}_ncu.err"
    echo "ncu exit $?; $(grep -c . "$OUT/xcheck_${tag}_ncu.csv") csv lines"
    tail -3 "$OUT/xcheck_${tag}_ncu.err"
  else
    echo "no ncu on this machine: the cross-check is skipped"
  fi
done
