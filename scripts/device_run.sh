#!/usr/bin/env bash
# Runs on a lent GPU machine, in the repository root, after scripts/pack_device.sh carried .carry/.
# Read-only on the GPU: no setting is changed (power/clock sweeps run only as --dry-run here).
# Usage: scripts/device_run.sh tests|bench|measure|single|fusecheck|final_a|final_b|final_c|dist|train_dist|focus|kprofile|s4_a|s4_b|s4_c|s4_d|s4_e|s5_a|s5_b|s5_c|s5_d|s5_e|s5_f|s5_g|s5_h
# (results under $OUT)
set -uo pipefail
source "$(dirname "$0")/device_env.sh"
: "${OUT:=/tmp/out}"; mkdir -p "$OUT"
# At most 8 files come back from $OUT: everything is written under /tmp/cnnergy_results and packed into one archive.
FINAL_OUT=$OUT; OUT=/tmp/cnnergy_results; rm -rf "$OUT"; mkdir -p "$OUT"
trap 'tar -czf "$FINAL_OUT/results.tgz" -C "$OUT" .' EXIT; trap 'exit 143' TERM
# Issue 7's matrix on nvidia-h200-x2: resnet50 and alexnet, bf16, data on the GPUs, global batch
# 64/128/256 (strong) and per-GPU 256 (weak) on 2 GPUs against 1, every GPU metered, DDP peer.
run_dist() {
    nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm,memory.total --format=csv | tee "$OUT/gpu.txt"
    for m in resnet50 alexnet; do
      for spec in "--global-batch 64" "--global-batch 128" "--global-batch 256" "--per-gpu-batch 256"; do
        tag="${m}_$(echo "$spec" | tr -d ' -')"
        timeout 50 cnnergy dist-train --device cuda --gpus 2 --model "$m" --precision bf16 --layout nhwc \
          --data synthetic:3x224x224 $spec --max-iters 30 --fixed-batch --no-eval --compare-single \
          --json "$OUT/dist_$tag.json" 2>&1 | tee "$OUT/dist_$tag.log" | grep -E "strong scaling|weak scaling|^total|energy per sample|img/s" | sed "s/^/$tag: /"
      done
      timeout 110 python3 "$CARRY/peer_pytorch_ddp.py" --model "$m" --configs 1:64,2:32,1:128,2:64,1:256,2:128,2:256 \
        --iters 20 --warmup 5 --out "$OUT/ddp_$m.json" 2>&1 | grep "img/s"
    done
}

# Nsight Compute on one training step of each cell (--profile-range: the last timed iteration, after
# cuDNN's search, cudnn.benchmark and torch.compile): every kernel's gpu__time_duration.sum, clocks
# left alone (nsys does not run here). KPROF_CACHE=none (default) keeps each kernel's cache as the
# step left it; ncu's own default, all, flushes every cache before each kernel. Report kprof_TAG.ncu-rep,
# its CSV kprof_TAG.csv (raw page, ns), the program's output kprof_TAG.log.
kprof() {  # tag limit_s command...
    local tag=$1 limit=$2; shift 2
    timeout "$limit" "$NCU" --clock-control none --cache-control "${KPROF_CACHE:-none}" --profile-from-start off \
      --target-processes all --metrics gpu__time_duration.sum -f -o "$OUT/kprof_$tag" "$@" > "$OUT/kprof_$tag.log" 2>&1
    echo "kprof $tag: exit $? after ${SECONDS}s (script time)"
    "$NCU" --import "$OUT/kprof_$tag.ncu-rep" --csv --page raw --print-units base --metrics gpu__time_duration.sum \
      > "$OUT/kprof_$tag.csv" 2>> "$OUT/kprof_$tag.log" || echo "kprof $tag: no report to import"
}
kprof_summary() {  # name csv_a csv_b: both tables and A - B to a file; categories and a short top list shown
    local ks=$CARRY/kernel_summary.py; [ -f "$ks" ] || ks=bench/kernel_summary.py
    python3 "$ks" "$OUT/kprof_$2.csv" "$OUT/kprof_$3.csv" --json "$OUT/kprof_$1.json" > "$OUT/kprof_$1.txt" 2>&1
    python3 "$ks" "$OUT/kprof_$2.csv" "$OUT/kprof_$3.csv" --top 6 2>&1
}
run_kprofile() {
    nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm,memory.total --format=csv | tee "$OUT/gpu.txt"
    NCU=$(command -v ncu || ls -d /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | sort -V | tail -1)
    [ -n "$NCU" ] || NCU=/usr/local/cuda/bin/ncu
    "$NCU" --version | tail -1 | tee "$OUT/ncu_version.txt"
    local ours peer="$CARRY/peer_pytorch.py" it="--iters 3 --warmup 3 --profile-range"
    ours=$(command -v bench_train_throughput)
    kprof ours_bf16 100 "$ours" --models resnet50 --batches 256 --precisions bf16 --layout nhwc --algo find \
      --fuse-relu on $it --out "$OUT/kprof_ours_bf16.json"
    kprof ours_fp32 100 "$ours" --models resnet50 --batches 256 --precisions fp32 --layout nchw --algo find \
      --fuse-relu on $it --out "$OUT/kprof_ours_fp32.json"
    kprof eager_fp32 110 python3 "$peer" --models resnet50 --batches 256 --precisions fp32 --compile "" $it \
      --out "$OUT/kprof_eager_fp32.json"
    kprof_summary fp32 ours_fp32 eager_fp32
    # Last: the compile (a minute or two) is the part most likely to run out of time.
    kprof compile_bf16 230 python3 "$peer" --precisions "" \
      --compile resnet50:256:bf16 $it --out "$OUT/kprof_compile_bf16.json"
    kprof_summary bf16 ours_bf16 compile_bf16
}

case "${1:-tests}" in
  tests)
    nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm,memory.total --format=csv | tee "$OUT/gpu.txt"
    timeout 300 test_backend_cuda > "$OUT/test_backend_cuda.log" 2>&1
    grep -E "^\[  (FAILED|SKIPPED|PASSED) " "$OUT/test_backend_cuda.log" | tail -30
    [ -x "$CARRY/bin/test_train_cuda" ] && CNNERGY_FASHION_MNIST_DIR=/tmp/fmnist timeout 120 test_train_cuda \
      > "$OUT/test_train_cuda.log" 2>&1; grep -E "^\[  (FAILED|SKIPPED|PASSED) " "$OUT/test_train_cuda.log" | tail -12
    [ -x "$CARRY/bin/test_dist" ] && timeout 120 test_dist --gtest_filter="*Nccl*:*nccl*:*Gpu*" --gtest_brief=1 2>&1 | tail -15
    timeout 120 cnnergy train --model lenet5 --data fashion-mnist:/tmp/fmnist --device cuda --epochs 5 --batch 64 \
      --json "$OUT/lenet_gpu.json" 2>&1 | tail -16
    ;;
  bench)
    timeout 280 bench_train_throughput --out "$OUT/ours.json" --iters 20 --warmup 5 2>&1 | tail -40
    timeout 290 python3 "$CARRY/peer_pytorch.py" --out "$OUT/pytorch.json" --iters 20 --warmup 5 2>&1 | tail -40
    ;;
  measure)
    timeout 100 bench_telemetry --seconds 5 --rounds 3 --windows 3 --window-s 8 --out "$OUT/telemetry.json" 2>&1 | tail -8
    timeout 150 cnnergy profile resnet50 --device cuda --batch 128 --precision bf16 --layout nhwc --passes 5 \
      --energy-top 3 --window-s 1.5 --windows 5 --extrapolate-epochs 90 --dataset-size 1281167 \
      --json "$OUT/profile_resnet50.json" 2>&1 | tail -22
    timeout 200 cnnergy sweep --model resnet34 --batch 64,128,256 --precision fp32,bf16 --layout nhwc --window-s 2 \
      --windows 3 --warmup 5 --db "$OUT/sweep.db" --report "$OUT/sweep_report.html" 2>&1 | tail -30
    cnnergy sweep --model resnet50 --power-limit all:50 --dry-run 2>&1 | tail -5
    timeout 120 bash "$CARRY/accuracy_vs_batch.sh" "$OUT" fashion-mnist:/tmp/fmnist 3 2>&1 | tail -6
    ;;
  train_dist)  # nvidia-h200-x2: the GPU training and NCCL tests, then issue 7's matrix
    CNNERGY_FASHION_MNIST_DIR=/tmp/fmnist timeout 150 test_train_cuda > "$OUT/test_train_cuda.log" 2>&1
    grep -E "^\[  (FAILED|SKIPPED|PASSED|  OK) |Failure|error" "$OUT/test_train_cuda.log" | tail -24
    timeout 90 test_dist --gtest_filter="*Nccl*:*nccl*:*Gpu*" > "$OUT/test_dist_gpu.log" 2>&1
    grep -E "^\[  (FAILED|PASSED) |tests ran" "$OUT/test_dist_gpu.log" | tail -8
    which mpirun orterun 2>&1 | head -2; ls /usr/lib/x86_64-linux-gnu/openmpi 2>&1 | head -2; cat /etc/os-release | head -2
    run_dist
    ;;
  single)  # nvidia-h200: the fused batch norm + ReLU checked, then measured against PyTorch in the
            # same call (fused and unfused cells), then every GPU test
    nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm,memory.total --format=csv | tee "$OUT/gpu.txt"
    timeout 60 test_backend_cuda --gtest_filter="*BatchNorm*:*Relu*" > "$OUT/test_bn.log" 2>&1
    grep -E "^\[  (FAILED|PASSED) |Failure" "$OUT/test_bn.log" | head -12
    timeout 150 bench_train_throughput --models resnet50,resnet34 --batches 64,256 --precisions bf16 --fuse-relu both \
      --out "$OUT/ours_bf16.json" 2>&1 | tail -9
    timeout 60 bench_train_throughput --models resnet50,resnet34 --batches 64 --precisions bf16 --cuda-graph on \
      --out "$OUT/ours_graph.json" 2>&1 | tail -2
    timeout 50 bench_train_throughput --models resnet50 --batches 256 --precisions tf32 --layout nhwc \
      --out "$OUT/ours_tf32_nhwc.json" 2>&1 | tail -1
    timeout 50 bench_train_throughput --models resnet50 --batches 256 --precisions tf32 \
      --out "$OUT/ours_tf32.json" 2>&1 | tail -1
    timeout 60 python3 "$CARRY/peer_pytorch.py" --models resnet50 --batches 256 --precisions tf32 --compile "" \
      --out "$OUT/pytorch_tf32.json" 2>&1 | tail -1
    timeout 200 python3 "$CARRY/peer_pytorch.py" --models resnet50,resnet34 --batches 64,256 --precisions bf16 \
      --compile resnet50:256:bf16 --out "$OUT/pytorch.json" 2>&1 | tail -6
    CNNERGY_FASHION_MNIST_DIR=/tmp/fmnist timeout 60 test_train_cuda > "$OUT/test_train_cuda.log" 2>&1
    grep -E "^\[  (FAILED|PASSED) |Failure|NOTE" "$OUT/test_train_cuda.log" | head -12
    timeout 100 test_backend_cuda > "$OUT/test_backend_cuda.log" 2>&1
    grep -E "^\[  (FAILED|PASSED) |tests ran" "$OUT/test_backend_cuda.log" | tail -8
    ;;
  fusecheck)  # one short call: fused against separate ReLU layers on the GPU, and how the b64
               # cells move with the algorithm choice (find, heuristic)
    timeout 60 test_backend_cuda --gtest_filter="*FusedRelu*:*AddMatches*" > "$OUT/test_bn.log" 2>&1
    grep -E "^\[  (FAILED|PASSED) |Failure|apart|Which|in fused" "$OUT/test_bn.log" | head -20
    timeout 90 test_train_cuda --gtest_filter="*Fused*:*WholeNetwork*" > "$OUT/test_train_cuda.log" 2>&1
    grep -E "^\[  (FAILED|PASSED) |apart|actual|parameter" "$OUT/test_train_cuda.log" | head -30
    for algo in heuristic find; do
      timeout 60 bench_train_throughput --models resnet34,resnet50 --batches 64 --precisions bf16 --fuse-relu both \
        --algo $algo --out "$OUT/ours_b64_$algo.json" 2>&1 | tail -4
    done
    ;;
  final_a)  # nvidia-h200: kernels and network checks, then our cells and PyTorch's in one call
    nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm,memory.total --format=csv | tee "$OUT/gpu.txt"
    timeout 60 test_backend_cuda --gtest_filter="*BatchNorm*:*AddMatches*" > "$OUT/test_bn.log" 2>&1
    grep -E "^\[  (FAILED|PASSED) |Failure" "$OUT/test_bn.log" | head -8
    timeout 80 test_train_cuda > "$OUT/test_train_cuda.log" 2>&1
    grep -E "^\[  (FAILED|PASSED) |apart|actual" "$OUT/test_train_cuda.log" | head -12
    timeout 120 bench_train_throughput --models resnet50,resnet34 --batches 64,256 --precisions bf16 --fuse-relu both \
      --out "$OUT/ours_bf16.json" 2>&1 | tail -9
    timeout 40 bench_train_throughput --models resnet50,resnet34 --batches 64 --precisions bf16 --cuda-graph on \
      --out "$OUT/ours_graph.json" 2>&1 | tail -2
    timeout 70 bench_train_throughput --models resnet50,vgg16 --batches 256 --precisions fp32,tf32 --layout nhwc \
      --out "$OUT/ours_nhwc.json" 2>&1 | tail -4
    timeout 170 python3 "$CARRY/peer_pytorch.py" --models resnet50,resnet34 --batches 64,256 --precisions bf16 \
      --compile resnet50:256:bf16 --out "$OUT/pytorch.json" 2>&1 | tail -6
    timeout 60 python3 "$CARRY/peer_pytorch.py" --models resnet50,vgg16 --batches 256 --precisions fp32,tf32 \
      --compile "" --out "$OUT/pytorch_fp32.json" 2>&1 | tail -4
    ;;
  s4_b)  # nvidia-h200: ResNet-50 bf16 at batch 128 and 64 under Nsight Compute (the b128 step is slow), find vs heuristic
    nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm,memory.total --format=csv | tee "$OUT/gpu.txt"
    NCU=$(command -v ncu || ls -d /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | sort -V | tail -1)
    ks=$CARRY/kernel_summary.py
    for b in 128 64; do
      kprof "ours_b$b" 90 "$(command -v bench_train_throughput)" --models resnet50 --batches $b --precisions bf16 \
        --iters 3 --warmup 3 --profile-range --out "$OUT/kprof_ours_b$b.json"
      rm -f "$OUT/kprof_ours_b$b.ncu-rep"
      python3 "$ks" "$OUT/kprof_ours_b$b.csv" --top 12 --json "$OUT/kprof_b$b.json" | tee "$OUT/kprof_b$b.txt" | head -40
    done
    timeout 60 bench_train_throughput --models resnet50 --batches 64,128 --precisions bf16 --algo heuristic \
      --out "$OUT/ours_heuristic.json" 2>&1 | tail -2
    ;;
  s4_a)  # nvidia-h200: kernel checks, the ResNet step checks, algorithm choices, bf16 matrix and peers
    nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm,memory.total --format=csv | tee "$OUT/gpu.txt"
    timeout 70 test_backend_cuda > "$OUT/test_backend_cuda.log" 2>&1
    grep -E "^\[  (FAILED|PASSED) |Failure" "$OUT/test_backend_cuda.log" | head -8
    timeout 40 test_train_cuda --gtest_filter="*FusedRelu*:*WholeNetwork*" > "$OUT/test_train_cuda.log" 2>&1
    grep -E "^\[  (FAILED|PASSED) |apart|actual" "$OUT/test_train_cuda.log" | head -8
    timeout 25 cnnergy model-info resnet50 --device cuda --show-algos --batch 256 --precision bf16 --layout nhwc \
      > "$OUT/algos_resnet50_bf16.txt" 2>&1; grep -E "layer1.0.conv1|fused" "$OUT/algos_resnet50_bf16.txt" | head -4
    timeout 150 bench_train_throughput --models resnet50,resnet34,vgg16,alexnet --batches 64,128,256 --precisions bf16 \
      --out "$OUT/ours_bf16.json" 2>&1 | tail -13
    timeout 50 bench_train_throughput --models resnet50 --batches 256 --precisions fp32,tf32 \
      --out "$OUT/ours_fp32.json" 2>&1 | tail -3
    timeout 230 python3 "$CARRY/peer_pytorch.py" --models resnet50,resnet34,vgg16,alexnet --batches 64,128,256 \
      --precisions bf16 --compile resnet50:256:bf16 --out "$OUT/pytorch.json" 2>&1 | tail -14
    timeout 40 python3 "$CARRY/peer_pytorch.py" --models resnet50 --batches 256 --precisions fp32,tf32 \
      --compile "" --out "$OUT/pytorch_fp32.json" 2>&1 | tail -3
    ;;
  s5_a)  # nvidia-h200: convolution tests (the graph-API policies), then ResNet-50 with the legacy find
          # against graph_find (host time per phase and per layer category), PyTorch eager beside
    nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm,memory.total --format=csv | tee "$OUT/gpu.txt"
    timeout 110 test_backend_cuda > "$OUT/test_backend_cuda.log" 2>&1
    grep -E "^\[  (FAILED|PASSED) |Failure|tests ran" "$OUT/test_backend_cuda.log" | head -12
    timeout 110 bench_train_throughput --models resnet50 --batches 64,128 --precisions bf16 --algo find,graph_find \
      --host-layers --out "$OUT/ours_bf16.json" 2>&1 | grep -vE "^    (forward|backward) +(relu|loss|flatten|pool|add|fc)"
    timeout 75 python3 "$CARRY/peer_pytorch.py" --models resnet50 --batches 64,128 --precisions bf16 --compile "" \
      --out "$OUT/pytorch_bf16.json" 2>&1 | grep -E "^resnet50 "
    timeout 120 bench_train_throughput --models resnet50 --batches 64,128,256 --precisions fp32 --algo find,graph_find \
      --iters 10 --warmup 3 --out "$OUT/ours_fp32.json" 2>&1 | tail -6
    timeout 75 python3 "$CARRY/peer_pytorch.py" --models resnet50 --batches 64,128,256 --precisions fp32 --compile "" \
      --iters 10 --warmup 3 --out "$OUT/pytorch_fp32.json" 2>&1 | grep -E "^resnet50 "
    timeout 45 bench_train_throughput --models resnet50 --batches 64 --precisions bf16 --algo graph_find \
      --cuda-graph on --out "$OUT/ours_bf16_graphed.json" 2>&1 | tail -1
    timeout 30 cnnergy model-info resnet50 --device cuda --show-algos --batch 128 --precision bf16 --layout nhwc \
      --conv-algo graph_find > "$OUT/algos_resnet50_bf16_graph.txt" 2>&1; grep -E "layer1.0.conv1|note|rror" "$OUT/algos_resnet50_bf16_graph.txt" | head -4
    ;;
  s5_b)  # nvidia-h200: GPU tests (training now on the "auto" policy), then ResNet-50 in bf16, fp32 and tf32
          # with auto against PyTorch in the same call (eager everywhere, torch.compile at bf16 b256)
    nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm,memory.total --format=csv | tee "$OUT/gpu.txt"
    timeout 60 test_backend_cuda > "$OUT/test_backend_cuda.log" 2>&1
    grep -E "^\[  (FAILED|PASSED) |Failure" "$OUT/test_backend_cuda.log" | head -8
    timeout 150 test_train_cuda > "$OUT/test_train_cuda.log" 2>&1
    grep -E "^\[  (FAILED|PASSED) |Failure|accuracy" "$OUT/test_train_cuda.log" | head -8
    timeout 30 cnnergy model-info resnet50 --device cuda --show-algos --batch 64 --precision bf16 --layout nhwc \
      > "$OUT/algos_resnet50_bf16_auto.txt" 2>&1; grep -cE "graph:" "$OUT/algos_resnet50_bf16_auto.txt"
    timeout 100 bench_train_throughput --models resnet50 --batches 64,128,256 --precisions bf16 \
      --out "$OUT/ours_bf16.json" 2>&1 | grep -E "^resnet50 "
    timeout 130 bench_train_throughput --models resnet50 --batches 64,128,256 --precisions fp32,tf32 --iters 10 \
      --warmup 3 --out "$OUT/ours_fp32_tf32.json" 2>&1 | grep -E "^resnet50 "
    timeout 110 python3 "$CARRY/peer_pytorch.py" --models resnet50 --batches 64,128,256 --precisions bf16 \
      --compile resnet50:256:bf16 --out "$OUT/pytorch_bf16.json" 2>&1 | grep -E "^resnet50 "
    timeout 100 python3 "$CARRY/peer_pytorch.py" --models resnet50 --batches 64,128,256 --precisions fp32,tf32 \
      --compile "" --iters 10 --warmup 3 --out "$OUT/pytorch_fp32_tf32.json" 2>&1 | grep -E "^resnet50 "
    ;;
  s5_c)  # nvidia-h200: the GPU training tests with Fashion-MNIST, ResNet-50 bf16 b256 (against eager and
          # torch.compile), then every ResNet-34 and AlexNet cell; ours ("auto") then PyTorch's per model
    nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm,memory.total --format=csv | tee "$OUT/gpu.txt"
    CNNERGY_FASHION_MNIST_DIR=/tmp/fmnist timeout 60 test_train_cuda > "$OUT/test_train_cuda.log" 2>&1
    grep -E "^\[  (FAILED|PASSED|SKIPPED) |Failure|LeNet" "$OUT/test_train_cuda.log" | head -8
    timeout 75 bench_train_throughput --models resnet50 --batches 256 --precisions bf16 \
      --out "$OUT/ours_resnet50_b256.json" 2>&1 | grep -E "^resnet50 "
    timeout 130 python3 "$CARRY/peer_pytorch.py" --models resnet50 --batches 256 --precisions bf16 \
      --compile resnet50:256:bf16 --out "$OUT/pytorch_resnet50_b256.json" 2>&1 | grep -E "^resnet50 "
    for m in "resnet34 110 90" "alexnet 60 50"; do
      set -- $m
      timeout "$2" bench_train_throughput --models "$1" --batches 64,128,256 --precisions bf16,fp32,tf32 --iters 10 \
        --warmup 3 --out "$OUT/ours_$1.json" 2>&1 | grep -E "^$1 "
      timeout "$3" python3 "$CARRY/peer_pytorch.py" --models "$1" --batches 64,128,256 --precisions bf16,fp32,tf32 \
        --compile "" --iters 10 --warmup 3 --out "$OUT/pytorch_$1.json" 2>&1 | grep -E "^$1 "
    done
    ;;
  s5_d)  # nvidia-h200: the cells s5_c's time limits cut (ResNet-50 b256, ResNet-34 b256 fp32/tf32, AlexNet
          # b128 tf32 and b256), ours ("auto") then PyTorch's in this call
    nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm,memory.total --format=csv | tee "$OUT/gpu.txt"
    timeout 150 bench_train_throughput --models resnet50 --batches 256 --precisions bf16,fp32,tf32 --iters 10 \
      --warmup 3 --out "$OUT/ours_resnet50_b256.json" 2>&1 | grep -E "^resnet50 "
    timeout 160 python3 "$CARRY/peer_pytorch.py" --models resnet50 --batches 256 --precisions bf16,fp32,tf32 \
      --compile resnet50:256:bf16 --iters 10 --warmup 3 --out "$OUT/pytorch_resnet50_b256.json" 2>&1 | grep -E "^resnet50 "
    timeout 80 bench_train_throughput --models resnet34 --batches 256 --precisions fp32,tf32 --iters 10 --warmup 3 \
      --out "$OUT/ours_resnet34_b256.json" 2>&1 | grep -E "^resnet34 "
    timeout 50 python3 "$CARRY/peer_pytorch.py" --models resnet34 --batches 256 --precisions fp32,tf32 --compile "" \
      --iters 10 --warmup 3 --out "$OUT/pytorch_resnet34_b256.json" 2>&1 | grep -E "^resnet34 "
    timeout 60 bench_train_throughput --models alexnet --batches 128,256 --precisions bf16,fp32,tf32 --iters 10 \
      --warmup 3 --out "$OUT/ours_alexnet.json" 2>&1 | grep -E "^alexnet "
    timeout 40 python3 "$CARRY/peer_pytorch.py" --models alexnet --batches 128,256 --precisions bf16,fp32,tf32 \
      --compile "" --iters 10 --warmup 3 --out "$OUT/pytorch_alexnet.json" 2>&1 | grep -E "^alexnet "
    ;;
  s5_e)  # nvidia-h200: every VGG-16 cell, ours ("auto") then PyTorch's
    nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm,memory.total --format=csv | tee "$OUT/gpu.txt"
    timeout 250 bench_train_throughput --models vgg16 --batches 64,128,256 --precisions bf16,fp32,tf32 --iters 10 \
      --warmup 3 --out "$OUT/ours_vgg16.json" 2>&1 | grep -E "^vgg16 "
    timeout 300 python3 "$CARRY/peer_pytorch.py" --models vgg16 --batches 64,128,256 --precisions bf16,fp32,tf32 \
      --compile "" --iters 10 --warmup 3 --out "$OUT/pytorch_vgg16.json" 2>&1 | grep -E "^vgg16 "
    ;;
  s5_f)  # nvidia-h200: VGG-16 b256 fp32/tf32 (s5_e's time limit cut ours), then ResNet-50 b256 fp32 again;
          # ours ("auto") then PyTorch's
    nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm,memory.total --format=csv | tee "$OUT/gpu.txt"
    timeout 250 bench_train_throughput --models vgg16 --batches 256 --precisions fp32,tf32 --iters 10 --warmup 3 \
      --out "$OUT/ours_vgg16_b256.json" 2>&1 | grep -E "^vgg16 "
    timeout 150 python3 "$CARRY/peer_pytorch.py" --models vgg16 --batches 256 --precisions fp32,tf32 --compile "" \
      --iters 10 --warmup 3 --out "$OUT/pytorch_vgg16_b256.json" 2>&1 | grep -E "^vgg16 "
    timeout 80 bench_train_throughput --models resnet50 --batches 256 --precisions fp32 --iters 10 --warmup 3 \
      --out "$OUT/ours_resnet50_b256_fp32.json" 2>&1 | grep -E "^resnet50 "
    timeout 45 python3 "$CARRY/peer_pytorch.py" --models resnet50 --batches 256 --precisions fp32 --compile "" \
      --iters 10 --warmup 3 --out "$OUT/pytorch_resnet50_b256_fp32.json" 2>&1 | grep -E "^resnet50 "
    ;;
  s5_g)  # nvidia-h200: AlexNet b64 and ResNet-50 b64/b128 bf16/fp32 again with the final "auto" (s5_c and
          # s5_b ran them with a search of 14 graph candidates that also grew the shared workspace)
    nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm,memory.total --format=csv | tee "$OUT/gpu.txt"
    timeout 30 bench_train_throughput --models alexnet --batches 64 --precisions bf16,fp32,tf32 --iters 10 --warmup 3 \
      --out "$OUT/ours_alexnet_b64.json" 2>&1 | grep -E "^alexnet "
    timeout 25 python3 "$CARRY/peer_pytorch.py" --models alexnet --batches 64 --precisions bf16,fp32,tf32 --compile "" \
      --iters 10 --warmup 3 --out "$OUT/pytorch_alexnet_b64.json" 2>&1 | grep -E "^alexnet "
    timeout 120 bench_train_throughput --models resnet50 --batches 64,128 --precisions bf16,fp32 --iters 10 --warmup 3 \
      --out "$OUT/ours_resnet50.json" 2>&1 | grep -E "^resnet50 "
    timeout 60 python3 "$CARRY/peer_pytorch.py" --models resnet50 --batches 64,128 --precisions bf16,fp32 --compile "" \
      --iters 10 --warmup 3 --out "$OUT/pytorch_resnet50.json" 2>&1 | grep -E "^resnet50 "
    ;;
  s5_h)  # nvidia-h200: ResNet-50 fp32 b64 and b256 with auto's default search (10 ranked engines, as in
          # s5_b) against PyTorch; s5_d and s5_g ran a search of 4
    nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm,memory.total --format=csv | tee "$OUT/gpu.txt"
    timeout 170 bench_train_throughput --models resnet50 --batches 64,256 --precisions fp32 --iters 10 --warmup 3 \
      --out "$OUT/ours_resnet50_fp32.json" 2>&1 | grep -E "^resnet50 "
    timeout 50 python3 "$CARRY/peer_pytorch.py" --models resnet50 --batches 64,256 --precisions fp32 --compile "" \
      --iters 10 --warmup 3 --out "$OUT/pytorch_resnet50_fp32.json" 2>&1 | grep -E "^resnet50 "
    ;;
  s4_d)  # nvidia-h200-x2, short: the recorded strong-scaling run again with 4x the steps, and the eager
          # run whose per-phase report shows the all-reduces behind backward
    for spec in "--global-batch 256 --cuda-graph --max-iters 160" "--global-batch 256 --max-iters 60"; do
      tag="resnet50_$(echo "$spec" | tr -d ' -')"
      timeout 90 cnnergy dist-train --device cuda --gpus 2 --model resnet50 --precision bf16 --layout nhwc \
        --data synthetic:3x224x224 --dataset-size 40000 $spec --warmup 3 --fixed-batch --no-eval \
        --compare-single --json "$OUT/dist_$tag.json" > "$OUT/dist_$tag.log" 2>&1
      grep -E "^ +[01] |strong scaling|^total|bucket" "$OUT/dist_$tag.log" | sed "s/^/$tag: /" | head -8
    done
    ;;
  s4_e)  # nvidia-h200: the fp32 (TF32 off) and tf32 cells of every model, ours then PyTorch's per model
    nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm,memory.total --format=csv | tee "$OUT/gpu.txt"
    for m in "resnet50 80 60" "resnet34 60 45" "vgg16 110 75" "alexnet 35 30"; do
      set -- $m
      timeout "$2" bench_train_throughput --models "$1" --batches 64,128,256 --precisions fp32,tf32 --iters 10 \
        --warmup 3 --out "$OUT/ours_$1.json" 2>&1 | grep -E "^$1 "
      timeout "$3" python3 "$CARRY/peer_pytorch.py" --models "$1" --batches 64,128,256 --precisions fp32,tf32 \
        --compile "" --iters 10 --warmup 3 --out "$OUT/pytorch_$1.json" 2>&1 | grep -E "^$1 "
    done
    ;;
  s4_c)  # nvidia-h200-x2: NCCL tests, recorded data-parallel ResNet-50 strong and weak against DDP, and
          # on GPU 0 the b128 step eager (find, heuristic) against recorded (host overhead or not)
    nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm,memory.total --format=csv | tee "$OUT/gpu.txt"
    timeout 90 test_dist --gtest_filter="*Nccl*" > "$OUT/test_dist_gpu.log" 2>&1
    grep -E "^\[  (FAILED|PASSED) |tests ran" "$OUT/test_dist_gpu.log" | tail -6
    for spec in "--global-batch 256 --cuda-graph" "--per-gpu-batch 256 --cuda-graph"; do
      tag="resnet50_$(echo "$spec" | tr -d ' -')"
      timeout 75 cnnergy dist-train --device cuda --gpus 2 --model resnet50 --precision bf16 --layout nhwc \
        --data synthetic:3x224x224 --dataset-size 40000 $spec --max-iters 60 --warmup 3 --fixed-batch --no-eval \
        --compare-single --json "$OUT/dist_$tag.json" 2>&1 | tee "$OUT/dist_$tag.log" | \
        grep -E "strong scaling|weak scaling|^total|energy per sample|img/s" | sed "s/^/$tag: /" | head -8
    done
    timeout 120 python3 "$CARRY/peer_pytorch_ddp.py" --model resnet50 --configs 1:256,2:128,2:256 \
      --iters 20 --warmup 5 --out "$OUT/ddp_resnet50.json" 2>&1 | grep "img/s"
    export CUDA_VISIBLE_DEVICES=0
    timeout 40 bench_train_throughput --models resnet50 --batches 128,256 --precisions bf16 --out "$OUT/b128_find.json" 2>&1 | tail -2
    timeout 40 bench_train_throughput --models resnet50 --batches 128,256 --precisions bf16 --cuda-graph on --out "$OUT/b128_graph.json" 2>&1 | tail -2
    timeout 40 bench_train_throughput --models resnet50 --batches 128,256 --precisions bf16 --algo heuristic --out "$OUT/b128_heur.json" 2>&1 | tail -2
    ;;
  final_b)  # nvidia-h200-x2: NCCL tests, the data-parallel step eager and recorded, under mpirun, DDP
    nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm,memory.total --format=csv | tee "$OUT/gpu.txt"
    timeout 90 test_dist --gtest_filter="*Nccl*" > "$OUT/test_dist_gpu.log" 2>&1
    grep -E "^\[  (FAILED|PASSED) |tests ran" "$OUT/test_dist_gpu.log" | tail -6
    for spec in "--global-batch 256" "--global-batch 256 --cuda-graph" "--global-batch 128 --cuda-graph" \
                "--per-gpu-batch 256 --cuda-graph"; do
      tag="resnet50_$(echo "$spec" | tr -d ' -')"
      timeout 60 cnnergy dist-train --device cuda --gpus 2 --model resnet50 --precision bf16 --layout nhwc \
        --data synthetic:3x224x224 --dataset-size 40000 $spec --max-iters 60 --warmup 3 --fixed-batch --no-eval \
        --compare-single --json "$OUT/dist_$tag.json" 2>&1 | tee "$OUT/dist_$tag.log" | \
        grep -E "strong scaling|weak scaling|^total|energy per sample" | sed "s/^/$tag: /"
    done
    source "$(dirname "$0")/device_mpi_env.sh"
    timeout 60 mpirun -np 2 cnnergy dist-train --launcher mpi --device cuda --gpus 2 --model resnet50 --precision bf16 \
      --layout nhwc --data synthetic:3x224x224 --dataset-size 40000 --global-batch 256 --max-iters 60 --warmup 3 \
      --fixed-batch --no-eval --cuda-graph --json "$OUT/dist_mpi.json" > "$OUT/dist_mpi.log" 2>&1
    echo "mpirun exit $?"; grep -E "MPI rank|^total|weights identical|error" "$OUT/dist_mpi.log" | head -6
    timeout 150 python3 "$CARRY/peer_pytorch_ddp.py" --model resnet50 --configs 1:256,2:128,2:256,1:128,2:64 \
      --iters 20 --warmup 5 --out "$OUT/ddp_resnet50.json" 2>&1 | grep "img/s"
    ;;
  final_c)  # nvidia-h200-x2, short: the ResNet-34 gradient bounds, and the recorded data-parallel
            # step with its kernels' stream priorities kept, against DDP in the same call
    CNNERGY_FASHION_MNIST_DIR=/nonexistent timeout 60 test_train_cuda --gtest_filter="*WholeNetwork*" \
      > "$OUT/test_train_cuda.log" 2>&1
    grep -E "^\[  (FAILED|PASSED) |actual" "$OUT/test_train_cuda.log" | head -6
    timeout 60 cnnergy dist-train --device cuda --gpus 2 --model resnet50 --precision bf16 --layout nhwc \
      --data synthetic:3x224x224 --global-batch 256 --max-iters 60 --warmup 3 --fixed-batch --no-eval \
      --cuda-graph --compare-single --json "$OUT/dist_graph_priority.json" 2>&1 | tee "$OUT/dist.log" | \
      grep -E "strong scaling|^total|energy per sample|^ +[01] "
    timeout 70 python3 "$CARRY/peer_pytorch_ddp.py" --model resnet50 --configs 2:128,1:256 --iters 20 --warmup 5 \
      --out "$OUT/ddp.json" 2>&1 | grep "img/s"
    ;;
  kprofile)  # nvidia-h200 or h100, one call: kernel time by category, ours against PyTorch (run_kprofile)
    run_kprofile
    ;;
  dist)  # issue 7's matrix (see run_dist)
    run_dist
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
