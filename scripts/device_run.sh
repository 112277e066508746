#!/usr/bin/env bash
# Runs on a lent GPU machine, in the repository root, after scripts/pack_device.sh carried .carry/.
# Read-only on the GPU: no setting is changed (power/clock sweeps run only as --dry-run here).
# Usage: scripts/device_run.sh tests|bench|measure|dist|focus   (results under $OUT)
set -uo pipefail
source "$(dirname "$0")/device_env.sh"
: "${OUT:=/tmp/out}"; mkdir -p "$OUT"
case "${1:-tests}" in
  tests)
    nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm,memory.total --format=csv | tee "$OUT/gpu.txt"
    timeout 300 test_backend_cuda > "$OUT/test_backend_cuda.log" 2>&1
    grep -E "^\[  (FAILED|SKIPPED|PASSED) " "$OUT/test_backend_cuda.log" | tail -30
    [ -x "$CARRY/bin/test_train_cuda" ] && CNNERGY_FASHION_MNIST_DIR=/tmp/fmnist timeout 120 test_train_cuda \
      > "$OUT/test_train_cuda.log" 2>&1; grep -E "^\[  (FAILED|SKIPPED|PASSED) " "$OUT/test_train_cuda.log" | tail -12
    [ -x "$CARRY/bin/test_dist" ] && timeout 120 test_dist --gtest_filter="*Nccl*:*nccl*:*Gpu*" --gtest_brief=1 2>&1 | tail -15
    timeout 120 cnnergy train --model lenet5 --data fashion-mnist:/tmp/fmnist --device cuda --epochs 5 --batch 64 \
      --out "$OUT/lenet_gpu.json" 2>&1 | tail -16
    ;;
  bench)
    timeout 280 bench_train_throughput --out "$OUT/ours.json" --iters 20 --warmup 5 2>&1 | tail -40
    timeout 290 python3 "$CARRY/peer_pytorch.py" --out "$OUT/pytorch.json" --iters 20 --warmup 5 2>&1 | tail -40
    ;;
  measure)
    timeout 100 bench_telemetry --seconds 5 --rounds 3 --windows 3 --window-s 8 --out "$OUT/telemetry.json" 2>&1 | tail -8
    timeout 150 cnnergy profile resnet50 --device cuda --batch 128 --precision bf16 --layout nhwc --reps 5 \
      --energy-top 3 --window-s 1.5 --windows 5 --extrapolate-epochs 90 --dataset-size 1281167 \
      --out "$OUT/profile_resnet50.json" 2>&1 | tail -22
    timeout 200 cnnergy sweep --model resnet34 --batch 64,128,256 --precision fp32,bf16 --layout nhwc --window-s 2 \
      --reps 3 --warmup 5 --db "$OUT/sweep.db" --report "$OUT/sweep_report.html" 2>&1 | tail -30
    cnnergy sweep --model resnet50 --power-limit all:50 --dry-run 2>&1 | tail -5
    timeout 120 bash "$CARRY/accuracy_vs_batch.sh" "$OUT" fashion-mnist:/tmp/fmnist 3 2>&1 | tail -6
    ;;
  dist)  # issue 7's matrix on nvidia-h200-x2: resnet50 and alexnet, bf16, data on the GPUs, global batch
         # 64/128/256 (strong) and per-GPU 256 (weak) on 2 GPUs against 1, every GPU metered, DDP peer
    nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm,memory.total --format=csv | tee "$OUT/gpu.txt"
    for m in resnet50 alexnet; do
      for spec in "--global-batch 64" "--global-batch 128" "--global-batch 256" "--per-gpu-batch 256"; do
        tag="${m}_$(echo "$spec" | tr -d ' -')"
        timeout 60 cnnergy dist-train --device cuda --gpus 2 --model "$m" --precision bf16 --layout nhwc \
          --data synthetic:3x224x224 $spec --max-iters 40 --fixed-batch --no-eval --compare-single \
          --json "$OUT/dist_$tag.json" 2>&1 | grep -E "strong scaling|weak scaling|^total|energy per sample" | sed "s/^/$tag: /"
      done
      timeout 150 python3 "$CARRY/peer_pytorch_ddp.py" --model "$m" --configs 1:64,2:32,1:128,2:64,1:256,2:128,2:256 \
        --iters 20 --warmup 5 --out "$OUT/ddp_$m.json" 2>&1 | grep "img/s"
    done
    ;;
  focus)  # one short call on nvidia-h200-x2: GPU training tests, 2-GPU strong scaling with the DDP
           # peer, CUDA-graph and memory cells with the PyTorch peer (each step bounded)
    nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm,memory.total --format=csv | tee "$OUT/gpu.txt"
    # The whole log goes to $OUT (brief mode prints failures only; a cut tail once hid which test failed).
    CNNERGY_FASHION_MNIST_DIR=/tmp/fmnist timeout 50 test_train_cuda > "$OUT/test_train_cuda.log" 2>&1
    grep -E "^\[  (FAILED|SKIPPED|PASSED) " "$OUT/test_train_cuda.log" | tail -12
    timeout 45 cnnergy dist-train --device cuda --gpus 2 --model resnet50 --precision bf16 --layout nhwc \
      --data synthetic:3x224x224 --global-batch 256 --max-iters 30 --fixed-batch --no-eval --compare-single \
      --json "$OUT/dist_strong_fixed.json" 2>&1 | tail -24
    timeout 40 python3 "$CARRY/peer_pytorch_ddp.py" --configs 2:128 --iters 20 --warmup 5 \
      --out "$OUT/ddp.json" 2>&1 | tail -4
    timeout 35 bench_train_throughput --models resnet50 --batches 256 --precisions bf16 --out "$OUT/ours_a.json" \
      2>&1 | tail -3
    timeout 35 bench_train_throughput --models resnet50,resnet34 --batches 64 --precisions bf16 --cuda-graph both \
      --out "$OUT/ours_b.json" 2>&1 | tail -6
    timeout 40 python3 "$CARRY/peer_pytorch.py" --models resnet50,resnet34 --batches 64,256 --precisions bf16 \
      --compile "" --out "$OUT/pytorch.json" 2>&1 | tail -6
    ;;
esac
