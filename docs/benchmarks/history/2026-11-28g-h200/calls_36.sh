#!/usr/bin/env bash
# Call 36 (nvidia-h200-x4, branch pool-relu-mask-gpu packed with Fashion-MNIST): GPU 0 runs the GPU
# tests (test_train_cuda whole, test_backend_cuda whole), then AlexNet tf32's rows; GPUs 1-3 run the
# VGG-16 and AlexNet rows with their peers (bench/train_table_device.sh). Peer better of two compiles
# where it fits (the unit's sixth field), one for fp32 VGG-16.
set -uo pipefail
cd "$(dirname "$0")"
[ -f .carry/bin.tar.xz ] && tar -xJf .carry/bin.tar.xz -C .carry && rm -f .carry/bin.tar.xz
source scripts/device_env.sh
: "${OUT:=/tmp/out}"; mkdir -p "$OUT"; R=/tmp/res/t; mkdir -p $R
T0=$SECONDS; D=535
(CALL=v DEADLINE_S=$D PEER_TIMEOUT_S=330 \
  Q1="vgg16:bf16:128,64:off:240:2 alexnet:bf16:256,64:off:220:2" \
  Q2="vgg16:fp32:64:off:270:1 alexnet:fp32:64,256:off:220:2" \
  Q3="vgg16:fp32:128:off:330:1 vgg16:tf32:128,64:off:150:1" \
  bash bench/train_table_device.sh > /tmp/v.log 2>&1) & P=$!
export CUDA_VISIBLE_DEVICES=0 CNNERGY_FASHION_MNIST_DIR=/tmp/fmnist
timeout 240 test_train_cuda > $R/test_train.log 2>&1; echo "test_train_cuda rc=$? t=$((SECONDS-T0))" | tee -a $R/summary.txt
timeout 100 test_backend_cuda > $R/test_backend.log 2>&1; echo "test_backend_cuda rc=$? t=$((SECONDS-T0))" | tee -a $R/summary.txt
nvidia-smi --query-gpu=index,name,driver_version,power.limit,clocks.max.sm,memory.total --format=csv >> $R/summary.txt
tar -czf $OUT/t.tgz -C /tmp/res t
unset CUDA_VISIBLE_DEVICES
CALL=a DEADLINE_S=$((D - (SECONDS - T0))) PEER_TIMEOUT_S=240 Q0="alexnet:tf32:256,64:off:200:2" \
  bash bench/train_table_device.sh > /tmp/a.log 2>&1
wait $P; tail -45 /tmp/v.log; tail -20 /tmp/a.log
grep -E "PASSED|FAILED|NOTE" $R/test_*.log | head -30
tar -czf $OUT/t.tgz -C /tmp/res t
