#!/usr/bin/env bash
# Call 47 (nvidia-h200): the final binary (the searches' workspace cap on, as by default) on ResNet-50
# bf16 b256 / b64 and fp32 b64 (CUDA graph), ours only: against 2026-11-28g's same cells (call 37 /
# 39, another call: indicative), the cap should not bind there (activations of GiBs). Reads only.
set -uo pipefail
cd "$(dirname "$0")"
[ -f .carry/bin.tar.xz ] && tar -xJf .carry/bin.tar.xz -C .carry && rm -f .carry/bin.tar.xz
source scripts/device_env.sh
: "${OUT:=/tmp/out}"; mkdir -p "$OUT"; R=/tmp/res/c47; mkdir -p $R
nvidia-smi --query-gpu=index,name,driver_version,power.limit,clocks.max.sm,memory.total --format=csv > $R/gpu.txt
timeout 150 bench_train_throughput --models resnet50 --precisions bf16 --batches 256,64 --cuda-graph on --algo-cache off \
  --iters 30 --warmup 5 --windows 3 --window-s 3 --out $R/r50_bf16.json > $R/r50_bf16.log 2>&1; echo "bf16 rc=$?"
timeout 150 bench_train_throughput --models resnet50 --precisions fp32 --batches 64 --cuda-graph on --algo-cache off \
  --iters 30 --warmup 5 --windows 3 --window-s 3 --out $R/r50_fp32.json > $R/r50_fp32.log 2>&1; echo "fp32 rc=$?"
tar -czf $OUT/c47.tgz -C /tmp/res c47
grep -h "^resnet50\|considered\|memory held\|energy" $R/*.log
