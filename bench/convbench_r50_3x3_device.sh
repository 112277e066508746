#!/usr/bin/env bash
# The convolution study's targets on a lent GPU (after `source scripts/device_env.sh`): ResNet-50's seven 3x3
# convolutions at batch 128 (torchvision v1.5: the stride-2 ones included), our implicit GEMM and
# im2col+GEMM against cuDNN's explicit GEMM, its best legacy algorithms and the graph search's pick,
# bf16 and fp32, NHWC; then the 56x56 layer with hardware counters (--metrics full). Output in $OUT.
set -u
OUT=${OUT:-/tmp/cnnergy_out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64:/usr/local/cuda/extras/CUPTI/lib64
source "$(dirname "$0")/r50_3x3_problems.sh"
IMPLS=gemm,implicit_gemm,implicit_precomp_gemm,algo_0,algo_1,algo_3,graph_find,own:implicit_gemm,own:im2col_gemm,own:winograd
cnnergy convbench "${R50_3X3_PROBLEMS[@]}" --impl "$IMPLS" --precision bf16,fp32 --layout nhwc --calls 10 --window-s 0 \
  --transfers off --json "$OUT/r50_3x3.json" > "$OUT/r50_3x3.txt" 2> "$OUT/r50_3x3.err"
echo "r50 3x3 exit $?"; tail -3 "$OUT/r50_3x3.err"
cnnergy convbench --problem n=128,c=64,h=56,w=56,k=64,r=3,s=3,pad=1 \
  --impl graph_find,implicit_precomp_gemm,gemm,own:implicit_gemm,own:im2col_gemm,own:direct,own:winograd,own:fft \
  --precision bf16,fp32 --layout nhwc --calls 5 --window-s 0 --transfers off --metrics full \
  --json "$OUT/r50_56_counters.json" > "$OUT/r50_56_counters.txt" 2> "$OUT/r50_56_counters.err"
echo "counters exit $?"; tail -3 "$OUT/r50_56_counters.err"; grep -m3 "counters:\|unavailable" "$OUT/r50_56_counters.txt"
