#!/usr/bin/env bash
# Call 44 (nvidia-h200, packed with Fashion-MNIST): the GPU tests on the searches' workspace cap
# (ExecutorOptions::workspace_within_activations), then AlexNet bf16 b256 and fp32 b64 with their
# peers (bench/train_table_device.sh, the cap on as by default), then the cap on against off in one
# process per precision (--workspace-within-activations both), AlexNet at b256 and b64. Reads only.
set -uo pipefail
cd "$(dirname "$0")"
[ -f .carry/bin.tar.xz ] && tar -xJf .carry/bin.tar.xz -C .carry && rm -f .carry/bin.tar.xz
source scripts/device_env.sh
: "${OUT:=/tmp/out}"; mkdir -p "$OUT"; R=/tmp/res/c44; mkdir -p $R
T0=$SECONDS
nvidia-smi --query-gpu=index,name,driver_version,power.limit,clocks.max.sm,memory.total --format=csv > $R/gpu.txt
CNNERGY_FASHION_MNIST_DIR=/tmp/fmnist timeout 200 test_train_cuda > $R/test_train.log 2>&1
echo "test_train_cuda rc=$? t=$((SECONDS-T0))" >> $R/summary.txt
timeout 120 test_backend_cuda > $R/test_backend.log 2>&1
echo "test_backend_cuda rc=$? t=$((SECONDS-T0))" >> $R/summary.txt
tar -czf $OUT/c44.tgz -C /tmp/res c44
CALL=p DEADLINE_S=$((440 - (SECONDS - T0))) PEER_TIMEOUT_S=150 \
  Q0="alexnet:bf16:256:off:100:2 alexnet:fp32:64:off:100:2" bash bench/train_table_device.sh > /tmp/p.log 2>&1
echo "table t=$((SECONDS-T0))" >> $R/summary.txt
for p in bf16 fp32 tf32; do
  (( SECONDS - T0 > 540 )) && break
  timeout $((580 - (SECONDS - T0))) bench_train_throughput --models alexnet --precisions $p --batches 256,64 \
    --algo-cache off --workspace-within-activations both --iters 30 --warmup 5 --windows 3 --window-s 2 \
    --out $R/ab_alexnet_$p.json > $R/ab_alexnet_$p.log 2>&1
  echo "ab $p rc=$? t=$((SECONDS-T0))" >> $R/summary.txt
done
tar -czf $OUT/c44.tgz -C /tmp/res c44
tail -8 /tmp/p.log
cat $R/summary.txt; grep -hE "^\[  (FAILED|PASSED) |NOTE" $R/test_*.log | head -20
grep -h "^alexnet\|considered\|memory held" $R/ab_*.log
