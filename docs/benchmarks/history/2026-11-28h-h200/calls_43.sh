#!/usr/bin/env bash
# Call 43 (nvidia-h200, packed with Fashion-MNIST): the Fashion-MNIST GPU test; AlexNet bf16 b256 and
# fp32 b64, a fresh process per convolution workspace cap (4096, 128, 32 MiB) with the search traced
# (CNNERGY_SEARCH_TRACE: each candidate's time and workspace) and what is live at the plan's peak;
# then VGG-16 fp32 b128 on the final rule with its peer (bench/train_table_device.sh). Reads only.
set -uo pipefail
cd "$(dirname "$0")"
[ -f .carry/bin.tar.xz ] && tar -xJf .carry/bin.tar.xz -C .carry && rm -f .carry/bin.tar.xz
source scripts/device_env.sh
: "${OUT:=/tmp/out}"; mkdir -p "$OUT"; R=/tmp/res/c43; mkdir -p $R
T0=$SECONDS
nvidia-smi --query-gpu=index,name,driver_version,power.limit,clocks.max.sm,memory.total --format=csv > $R/gpu.txt
CNNERGY_FASHION_MNIST_DIR=/tmp/fmnist timeout 150 test_train_cuda --gtest_filter='*FashionMnist*' > $R/test_fmnist.log 2>&1
echo "fmnist rc=$? t=$((SECONDS-T0))" >> $R/summary.txt
for cell in "alexnet bf16 256" "alexnet fp32 64"; do
  set -- $cell
  for ws in 4096 128 32; do
    f=$R/ab_${1}_${2}_b${3}_ws${ws}
    CNNERGY_SEARCH_TRACE=1 timeout 60 bench_train_throughput --models $1 --precisions $2 --batches $3 \
      --algo-cache off --memory-at-peak 8 --workspace-mib $ws --iters 30 --warmup 5 --windows 3 --window-s 2 \
      --out $f.json > $f.log 2>&1
    echo "$cell ws $ws rc=$? t=$((SECONDS-T0))" >> $R/summary.txt
  done
done
tar -czf $OUT/c43.tgz -C /tmp/res c43
CALL=n DEADLINE_S=$((570 - (SECONDS - T0))) PEER_TIMEOUT_S=330 Q0="vgg16:fp32:128:off:300:1" \
  bash bench/train_table_device.sh > /tmp/n.log 2>&1
tail -12 /tmp/n.log
cat $R/summary.txt; grep -h "NOTE\|PASSED\|FAILED" $R/test_fmnist.log
grep -h "^alexnet\|memory held\|and: optimizer" $R/ab_*.log
tar -czf $OUT/c43.tgz -C /tmp/res c43
