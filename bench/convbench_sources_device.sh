#!/usr/bin/env bash
# The convolution study on a lent GPU (after `source scripts/device_env.sh`): the im2col+GEMM target (our
# own:im2col_gemm against cuDNN's explicit `gemm`, NCHW forward, ResNet-50's 3x3 convolutions at
# batch 128, with hardware counters), and the model problem source with energy windows and counters
# (every distinct convolution of ResNet-50 at batch 128). Output in $OUT.
set -u
OUT=${OUT:-/tmp/cnnergy_out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64:/usr/local/cuda/extras/CUPTI/lib64
source "$(dirname "$0")/r50_3x3_problems.sh"
cnnergy convbench "${R50_3X3_PROBLEMS[@]}" --impl gemm,implicit_precomp_gemm,graph_find,own:im2col_gemm,own:winograd,own:implicit_gemm \
  --direction forward --precision bf16,fp32 --layout nchw --calls 10 --window-s 0 --transfers off --metrics full \
  --json "$OUT/r50_3x3_nchw.json" > "$OUT/r50_3x3_nchw.txt" 2> "$OUT/r50_3x3_nchw.err"
echo "r50 3x3 nchw exit $?"; tail -2 "$OUT/r50_3x3_nchw.err"
cnnergy convbench --model resnet50 --batch 128 --impl graph_find,own:implicit_gemm,own:im2col_gemm --precision bf16 \
  --layout nchw --calls 5 --warmup 1 --windows 1 --window-s 0.5 --metrics full \
  --json "$OUT/r50_model.json" > "$OUT/r50_model.txt" 2> "$OUT/r50_model.err"
echo "model exit $?"; tail -2 "$OUT/r50_model.err"
