#!/usr/bin/env bash
# GPU 0 of call 33: the branch's GPU tests, then main against the branch (peak memory), AlexNet's workspace cap.
set -uo pipefail
cd "$(dirname "$0")"
CALL=${CALL:-g0}; export CUDA_VISIBLE_DEVICES=0; C=${CORES:-0-7}
R=/tmp/res_$CALL; rm -rf $R; mkdir -p $R
: "${OUT:=/tmp/out}"; mkdir -p "$OUT"
trap 'tar -czf "$OUT/res_$CALL.tgz" -C $R .' EXIT
T0=$SECONDS
gl() { grep -E "^\[  (FAILED|SKIPPED) |^\[  PASSED|tests ran|Failure" "$1" | tail -${2:-25}; }
taskset -c $C timeout 150 test_backend_cuda > $R/test_backend.log 2>&1; echo "test_backend rc=$? t=$((SECONDS-T0))"; gl $R/test_backend.log 12
taskset -c $C timeout 170 test_train_cuda --gtest_filter='*:-*FashionMnist*' > $R/test_train.log 2>&1; echo "test_train rc=$? t=$((SECONDS-T0))"; gl $R/test_train.log
b() {  # tag binary model precision batches graph extra...
  local tag=$1 bin=$2 m=$3 p=$4 bs=$5 cg=$6; shift 6
  local l=$((530 - (SECONDS - T0))); (( l < 20 )) && { echo "skip $tag"; return; }
  (( l > 90 )) && l=90
  taskset -c $C timeout $l $bin --models $m --batches $bs --precisions $p --cuda-graph $cg --algo-cache /tmp/algo_g0 \
    --iters 30 --warmup 5 "$@" --out $R/$tag.json > $R/$tag.log 2>&1
  echo "$tag rc=$? t=$((SECONDS-T0))"; grep -E "^$m +[0-9]|memory held|peak|arena|largest" $R/$tag.log | head -8
}
b r50bf16_branch bench_train_throughput resnet50 bf16 256,64 on
b r50bf16_main bench_train_throughput_main resnet50 bf16 256,64 on
b r50tf32_branch bench_train_throughput resnet50 tf32 256 on
b r50tf32_main bench_train_throughput_main resnet50 tf32 256 on
for w in 4096 64 16; do
  b alex_bf16_w$w bench_train_throughput alexnet bf16 256 off --workspace-mib $w
  b alex_fp32_w$w bench_train_throughput alexnet fp32 64 off --workspace-mib $w
done
echo "done t=$((SECONDS-T0))"
