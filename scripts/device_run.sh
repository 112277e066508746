#!/usr/bin/env bash
# Runs on a lent GPU machine, in the repository root, after scripts/pack_device.sh carried .carry/.
# Read-only on the GPU: no setting is changed (power/clock sweeps run only as --dry-run here).
# Usage: scripts/device_run.sh MODE   (results under $OUT/results.tgz; `list` prints the modes)
# Each mode answers one question; bench/README.md says which machine kind it needs and how long it
# takes. Modes that compare against PyTorch run the peer in the same call, on the same GPU.
set -uo pipefail
mode=${1:-tests}
modes="tests throughput-matrix kernel-profile conv-algorithms cuda-graph fused-relu multi-gpu telemetry sweep-report accuracy-vs-batch inference onnx-export onnx-gpu onnx-trained infer-profile train-profile train-energy stability"
if [ "$mode" = list ] || [ "$mode" = --help ] || [ "$mode" = -h ]; then
  echo "modes: $modes"; echo "see bench/README.md"; exit 0
fi
case " $modes " in *" $mode "*) ;; *) echo "device_run.sh: unknown mode '$mode' (modes: $modes)" >&2; exit 2 ;; esac
source "$(dirname "$0")/device_env.sh"
: "${OUT:=/tmp/out}"; mkdir -p "$OUT"
# At most 8 files come back from $OUT: everything is written under /tmp/cnnergy_results and packed into one archive.
FINAL_OUT=$OUT; OUT=/tmp/cnnergy_results; rm -rf "$OUT"; mkdir -p "$OUT"
trap 'tar -czf "$FINAL_OUT/results.tgz" -C "$OUT" .' EXIT; trap 'exit 143' TERM

gpu_info() {
  nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm,memory.total --format=csv | tee "$OUT/gpu.txt"
}
peer() { python3 "$CARRY/peer_pytorch.py" "$@"; }
# A test binary the pack carried (pack_device.sh: CNNERGY_EXTRA_TARGETS / CNNERGY_EXTRA_BINS for
# test_train_cuda and test_parallel), or a note that it did not travel.
have() { [ -x "$CARRY/bin/$1" ] || { echo "$1: not carried (see bench/README.md, 'tests')"; return 1; }; }
gtest_lines() { grep -E "^\[  (FAILED|SKIPPED|PASSED) |tests ran|Failure" "$1" | tail -"${2:-12}"; }

# ---- tests: does every GPU test binary the build makes pass here? --------------------------------
# The binaries are the build's manifest (gpu_tests.txt: every test labelled gpu, carried by
# pack_device.sh); each runs whole under its own limit (GPU_TEST_LIMIT_S, default 300 s) and prints one
# summary line: passed, failed, skipped, seconds, its slowest test. Logs and gtest XML in the archive.
run_tests() {
  gpu_info
  local manifest=$CARRY/gpu_tests.txt limit=${GPU_TEST_LIMIT_S:-300} jobs=${GPU_TEST_JOBS:-1} status=0 name
  [ -s "$manifest" ] || { echo "tests: no $manifest (run scripts/pack_device.sh on a CUDA build)" >&2; return 2; }
  local t0=$SECONDS running=0
  # GPU_TEST_JOBS > 1 runs that many binaries at once on the one GPU (correctness only: their
  # seconds then include the wait for the GPU, an upper bound of each alone).
  while read -r name; do
    [ -n "$name" ] || continue
    if [ ! -x "$CARRY/bin/$name" ]; then echo "$name: not carried" > "$OUT/$name.summary"; echo 1 > "$OUT/$name.rc"; continue; fi
    (
      s=$SECONDS
      CNNERGY_FASHION_MNIST_DIR=/tmp/fmnist timeout "$limit" "$CARRY/bin/$name" --gtest_output="xml:$OUT/$name.xml" \
        > "$OUT/$name.log" 2>&1
      rc=$?
      python3 "$CARRY/gtest_summary.py" "$name" "$OUT/$name.xml" "$rc" "$((SECONDS - s))" > "$OUT/$name.summary" 2>&1 \
        || { [ "$rc" = 0 ] && rc=1; }
      echo "$rc" > "$OUT/$name.rc"
    ) &
    running=$((running + 1))
    if [ "$running" -ge "$jobs" ]; then wait -n; running=$((running - 1)); fi
  done < "$manifest"
  wait
  while read -r name; do
    [ -n "$name" ] || continue
    cat "$OUT/$name.summary"
    if [ "$(cat "$OUT/$name.rc" 2>/dev/null || echo 1)" != 0 ]; then
      status=1; grep -E "^\[  FAILED  \]|Failure$" "$OUT/$name.log" 2>/dev/null | head -20
    fi
  done < "$manifest"
  echo "all GPU test binaries: $((SECONDS - t0)) s wall, $jobs at a time, $([ $status = 0 ] && echo passed || echo FAILED)"
  return $status
}

# ---- throughput-matrix: images/s of our training step against eager PyTorch, cell by cell ---------
# MODELS, BATCHES, PRECISIONS pick the cells (defaults below: 8 cells, about 5 minutes on an H100);
# COMPILE="resnet50:256:bf16" adds torch.compile cells; MODES="eager,compile,reduce-overhead,
# max-autotune-no-cudagraphs" runs every cell in each mode (compiled ones twice, the best kept) and the
# table adds the ratio to the best mode; ITERS / WARMUP per cell.
run_throughput_matrix() {
  gpu_info
  local models=${MODELS:-resnet50,resnet34} batches=${BATCHES:-64,256} precisions=${PRECISIONS:-bf16,fp32}
  local it="--iters ${ITERS:-10} --warmup ${WARMUP:-3}"
  timeout 280 bench_train_throughput --models "$models" --batches "$batches" --precisions "$precisions" $it \
    --out "$OUT/ours.json" 2>&1 | tail -20
  timeout 280 python3 "$CARRY/peer_pytorch.py" --models "$models" --batches "$batches" --precisions "$precisions" \
    --compile "${COMPILE:-}" ${MODES:+--modes "$MODES"} $it --out "$OUT/pytorch.json" 2>&1 | tail -20
  python3 "$CARRY/compare_throughput.py" --ours "$OUT/ours.json" --peer "$OUT/pytorch.json" \
    | tee "$OUT/compare.md"
}

# ---- kernel-profile: where does a step's GPU time go, by kernel category, ours against PyTorch? ---
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
run_kernel_profile() {
  gpu_info
  NCU=$(command -v ncu || ls -d /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | sort -V | tail -1)
  [ -n "$NCU" ] || NCU=/usr/local/cuda/bin/ncu
  "$NCU" --version | tail -1 | tee "$OUT/ncu_version.txt"
  local ours it="--iters 3 --warmup 3 --profile-range"
  ours=$(command -v bench_train_throughput)
  kprof ours_bf16 100 "$ours" --models resnet50 --batches 256 --precisions bf16 --layout nhwc $it \
    --out "$OUT/kprof_ours_bf16.json"
  kprof ours_fp32 100 "$ours" --models resnet50 --batches 256 --precisions fp32 --layout nchw $it \
    --out "$OUT/kprof_ours_fp32.json"
  kprof eager_fp32 110 python3 "$CARRY/peer_pytorch.py" --models resnet50 --batches 256 --precisions fp32 \
    --compile "" $it --out "$OUT/kprof_eager_fp32.json"
  kprof_summary fp32 ours_fp32 eager_fp32
  # Last: the compile (a minute or two) is the part most likely to run out of time.
  kprof compile_bf16 230 python3 "$CARRY/peer_pytorch.py" --precisions "" --compile resnet50:256:bf16 $it \
    --out "$OUT/kprof_compile_bf16.json"
  kprof_summary bf16 ours_bf16 compile_bf16
}

# ---- conv-algorithms: what does each convolution policy cost, device plus host time per phase? ---
run_conv_algorithms() {
  gpu_info
  timeout 30 cnnergy model-info resnet50 --device cuda --show-algos --batch 64 --precision bf16 --layout nhwc \
    > "$OUT/algos_resnet50_bf16.txt" 2>&1; grep -cE "graph:" "$OUT/algos_resnet50_bf16.txt"
  timeout 200 bench_train_throughput --models resnet50 --batches 64,128 --precisions bf16 \
    --algo find,graph_find,auto,heuristic --host-layers --out "$OUT/ours_algos.json" 2>&1 \
    | grep -vE "^    (forward|backward) +(relu|loss|flatten|pool|add|fc)"
  timeout 90 python3 "$CARRY/peer_pytorch.py" --models resnet50 --batches 64,128 --precisions bf16 --compile "" \
    --out "$OUT/pytorch_bf16.json" 2>&1 | grep -E "^resnet50 "
}

# ---- cuda-graph: how much host overhead does replaying the step as one CUDA graph remove? --------
run_cuda_graph() {
  gpu_info
  timeout 150 bench_train_throughput --models resnet50,resnet34 --batches 64,256 --precisions bf16 --cuda-graph both \
    --out "$OUT/ours_graph.json" 2>&1 | tail -10
  timeout 120 python3 "$CARRY/peer_pytorch.py" --models resnet50,resnet34 --batches 64,256 --precisions bf16 \
    --compile "" --out "$OUT/pytorch.json" 2>&1 | tail -6
}

# ---- fused-relu: is batch norm + ReLU fused exact, and what does fusing buy? ----------------------
run_fused_relu() {
  gpu_info
  timeout 60 test_backend_cuda --gtest_filter="*BatchNorm*:*FusedRelu*:*AddMatches*" > "$OUT/test_bn.log" 2>&1
  gtest_lines "$OUT/test_bn.log"
  if have test_train_cuda; then
    timeout 90 test_train_cuda --gtest_filter="*Fused*:*WholeNetwork*" > "$OUT/test_train_cuda.log" 2>&1
    grep -E "^\[  (FAILED|PASSED) |apart|actual|parameter" "$OUT/test_train_cuda.log" | head -30
  fi
  timeout 150 bench_train_throughput --models resnet50,resnet34 --batches 64,256 --precisions bf16 --fuse-relu both \
    --out "$OUT/ours_fuse.json" 2>&1 | tail -9
}

# ---- multi-gpu: how do data-parallel training and its energy scale, against PyTorch DDP? ----------
# nvidia-h200-x2: NCCL tests, ResNet-50 strong (global batch 256, eager and recorded) and weak
# (256 per GPU) scaling against one GPU, one run under mpirun, then DDP in the same call.
run_multi_gpu() {
  gpu_info
  if have test_parallel; then
    timeout 90 test_parallel --gtest_filter="*Nccl*" > "$OUT/test_parallel_gpu.log" 2>&1
    gtest_lines "$OUT/test_parallel_gpu.log" 6
  fi
  for spec in "--global-batch 256" "--global-batch 256 --cuda-graph" "--per-gpu-batch 256 --cuda-graph"; do
    tag="resnet50_$(echo "$spec" | tr -d ' -')"
    timeout 75 cnnergy dist-train --device cuda --gpus 2 --model resnet50 --precision bf16 --layout nhwc \
      --data synthetic:3x224x224 --dataset-size 40000 $spec --max-iters 60 --warmup 3 --fixed-batch --no-eval \
      --compare-single --json "$OUT/dist_$tag.json" > "$OUT/dist_$tag.log" 2>&1
    grep -E "strong scaling|weak scaling|^total|energy per sample" "$OUT/dist_$tag.log" | sed "s/^/$tag: /"
  done
  if [ -f "$(dirname "$0")/device_mpi_env.sh" ]; then
    source "$(dirname "$0")/device_mpi_env.sh"
    timeout 60 mpirun -np 2 cnnergy dist-train --launcher mpi --device cuda --gpus 2 --model resnet50 \
      --precision bf16 --layout nhwc --data synthetic:3x224x224 --dataset-size 40000 --global-batch 256 \
      --max-iters 60 --warmup 3 --fixed-batch --no-eval --cuda-graph --json "$OUT/dist_mpi.json" > "$OUT/dist_mpi.log" 2>&1
    echo "mpirun exit $?"; grep -E "MPI rank|^total|weights identical|error" "$OUT/dist_mpi.log" | head -6
  fi
  timeout 150 python3 "$CARRY/peer_pytorch_ddp.py" --model resnet50 --configs 1:256,2:128,2:256 \
    --iters 20 --warmup 5 --out "$OUT/ddp_resnet50.json" 2>&1 | grep "img/s"
}

# ---- telemetry: how fast and how exact are the power/energy readings, and what do they cost? -----
run_telemetry() {
  gpu_info
  if have bench_telemetry; then
    timeout 100 bench_telemetry --seconds 5 --rounds 3 --windows 3 --window-s 8 --out "$OUT/telemetry.json" 2>&1 | tail -8
  fi
  timeout 150 cnnergy profile resnet50 --device cuda --batch 128 --precision bf16 --layout nhwc --passes 5 \
    --energy-top 3 --window-s 1.5 --windows 5 --extrapolate-epochs 90 --dataset-size 1281167 \
    --json "$OUT/profile_resnet50.json" 2>&1 | tail -22
}

# ---- sweep-report: a metered batch x precision sweep end to end, with its HTML report ------------
run_sweep_report() {
  gpu_info
  timeout 200 cnnergy sweep --model resnet34 --batch 64,128,256 --precision fp32,bf16 --layout nhwc --window-s 2 \
    --windows 3 --warmup 5 --db "$OUT/sweep.db" --report "$OUT/sweep_report.html" 2>&1 | tail -30
  cnnergy sweep --model resnet50 --power-limit all:50 --dry-run 2>&1 | tail -5
}

# ---- stability: does the main job name the same optimum when run again? ------------------------
# First instant vs 1 s-average power against the energy counter on short windows under load
# (bench/power_fields.py over `monitor --jsonl`, about a minute), then the README's main job (ResNet-34
# batch x precision; interleaved order and settled starts by default) RUNS times (3) in one call, each
# with the bootstrap stability of its optima, the reference's drift and the share of its wall time
# spent settling (target: at most 20 %). Read-only: no GPU setting is changed. STAB_TIMEOUT (150 s per
# run), STAB_WINDOW_S (2) and POWER_WINDOWS_S override.
run_stability() {
  gpu_info
  echo "== instant vs 1 s-average power against the counter, short windows under load =="
  timeout 75 cnnergy monitor --interval-ms 20 --jsonl "$OUT/power_fields.jsonl" -- \
    cnnergy train --model resnet50 --data synthetic --device cuda --precision bf16 --layout nhwc --batch 128 \
      --epochs 1 --dataset-size 51200 --max-iters 300 > "$OUT/power_fields_monitor.log" 2>&1
  echo "exit $?"
  python3 "$CARRY/power_fields.py" "$OUT/power_fields.jsonl" --windows-s "${POWER_WINDOWS_S:-0.25,0.5,1,2,5}" \
    | tee "$OUT/power_fields.md"
  local runs=${RUNS:-3} i
  for i in $(seq 1 "$runs"); do
    echo "== main job, run $i of $runs =="
    timeout "${STAB_TIMEOUT:-150}" cnnergy sweep --model resnet34 --batch 64,128,256 --precision fp32,bf16 \
      --layout nhwc --window-s "${STAB_WINDOW_S:-2}" --stability 1000 --new --db "$OUT/stability.db" \
      --report "$OUT/stability_run$i.html" > "$OUT/stability_run$i.log" 2>&1
    echo "exit $?"; grep -E "^min |^max |reference drift|steady starts|^trials:" "$OUT/stability_run$i.log" \
      | cut -c1-240
  done
  echo "== the runs against each other =="
  cnnergy report "$OUT/stability.db" 2>&1 | sed -n '/^reruns of sweep/,$p'
}

# ---- accuracy-vs-batch: does a larger batch cost accuracy for the same epochs (Castro et al. 2019,
# Section 8.5)? ResNet-34 on Fashion-MNIST at batch 64, 128, 256.
run_accuracy_vs_batch() {
  gpu_info
  timeout 280 bash "$CARRY/accuracy_vs_batch.sh" "$OUT" fashion-mnist:/tmp/fmnist "${EPOCHS:-3}" 2>&1 | tail -6
}

# ---- inference: batch-1 latency, large-batch throughput and energy per image, ours against PyTorch
# (eager, eager in a CUDA graph, torch.compile default / reduce-overhead / max-autotune) and ONNX Runtime,
# same GPU, same call; then ResNet-50 fp32 on the CPU against ONNX Runtime's CPU provider. Every step's
# timeout is cut to what is left of INFER_BUDGET_S (default 480 s), so the mode ends, packs and prints
# the table (compare.md) last. INFER_MODELS / COMPILE_TIMEOUT (s per torch.compile mode) override.
run_inference() {
  gpu_info
  local budget=${INFER_BUDGET_S:-480} models=${INFER_MODELS:-resnet50,resnet34,vgg16,alexnet}
  local ci="$CARRY/infer_compare.py" pi="$CARRY/peer_infer.py"
  [ -f "$pi" ] || { pi=bench/peer_infer.py; ci=bench/infer_compare.py; }
  cap() { local left=$(( budget - SECONDS - 25 )); [ "$left" -lt "$1" ] && echo $(( left > 5 ? left : 5 )) || echo "$1"; }
  step() {  # tag limit_s command...: one timed step, its log under $OUT, one line on the console
    local tag=$1 limit; limit=$(cap "$2"); shift 2
    if [ $(( budget - SECONDS )) -lt 35 ]; then echo "$tag: skipped (INFER_BUDGET_S=$budget spent)"; return; fi
    timeout "$limit" "$@" > "$OUT/$tag.log" 2>&1; local rc=$?
    echo "$tag: exit $rc after ${SECONDS}s (limit ${limit}s)"; [ $rc = 0 ] || tail -3 "$OUT/$tag.log"
  }
  ours() {  # model precision batch device
    local layout=nchw; case $2 in bf16|fp16) layout=nhwc ;; esac
    step "ours_$4_$1_$2_b$3" "${5:-60}" cnnergy infer "$1" --device "$4" --precision "$2" --layout "$layout" \
      --batch "$3" --requests "${REQUESTS:-200}" --warmup "${WARMUP:-10}" --windows "${WINDOWS:-3}" --window-s 1 \
      --idle-s "${IDLE_S:-1}" --json "$OUT/ours_$4_$1_$2_b$3.json"
  }
  for m in ${models//,/ }; do ours "$m" bf16 1 cuda; ours "$m" bf16 256 cuda 90; done
  ours resnet50 fp32 1 cuda; ours resnet50 fp16 1 cuda
  step peer_gpu_bf16 180 python3 "$pi" --models "$models" --precisions bf16 --batches 1,256 --engines eager,graph,onnxruntime \
    --out "$OUT/peer_gpu_bf16.json"
  step peer_gpu_r50 40 python3 "$pi" --models resnet50 --precisions fp32,fp16 --batches 1 --engines eager,graph \
    --out "$OUT/peer_gpu_r50.json"
  # The CPU: ResNet-50 fp32, batch 1 and 32, ours against ONNX Runtime (CPU provider) and eager PyTorch.
  # (Few requests: how fast our CPU kernels run ResNet-50 is the question, and a step that times out keeps nothing.)
  REQUESTS=20 WARMUP=2 WINDOWS=2 IDLE_S=0 ours resnet50 fp32 1 cpu 60
  REQUESTS=3 WARMUP=0 WINDOWS=1 IDLE_S=0 ours resnet50 fp32 32 cpu 100
  step peer_cpu 100 python3 "$pi" --device cpu --models resnet50 --precisions fp32 --batches 1,32 \
    --engines onnxruntime,eager --requests 100 --warmup 3 --windows 2 --out "$OUT/peer_cpu.json"
  # The tuner for inference on this GPU: the cheapest joules per image whose p99 meets 5 ms (no knob changed).
  step sweep_infer 60 cnnergy sweep --mode infer --model resnet50 --batch 1,8,64 --precision bf16 --layout nhwc \
    --window-s 1 --windows 2 --warmup 3 --requests 100 --objective energy --max-p99-ms 5 --db "$OUT/sweep_infer.db" \
    --report "$OUT/sweep_infer.html"
  grep -E "^  (batch|trial)|p99 <=|best p99" "$OUT/sweep_infer.log" | head -8
  # torch.compile last: compiling is what most often runs long (each mode has its own limit).
  local ct=${COMPILE_TIMEOUT:-$(( (budget - SECONDS - 40) / 3 ))}; [ "$ct" -gt 150 ] && ct=150
  [ "$ct" -ge 30 ] || echo "peer_gpu_compile: skipped (${ct}s a mode left of INFER_BUDGET_S=$budget)"
  [ "$ct" -ge 30 ] && step peer_gpu_compile $(( 3 * ct + 20 )) python3 "$pi" --models resnet50 --precisions bf16 --batches 1,256 \
    --engines compile,reduce-overhead,max-autotune --compile-timeout "$ct" --out "$OUT/peer_gpu_compile.json"
  grep -hE "batch +(1|32|256) " "$OUT"/peer_*.log | grep -E "failed|p50" | cut -c1-150
  python3 "$ci" --detail --ours "$OUT"/ours_*.json --peer "$OUT"/peer_*.json > "$OUT/compare_detail.md" 2>&1
  echo; python3 "$ci" --ours "$OUT"/ours_*.json --peer "$OUT"/peer_*.json 2>&1 | tee "$OUT/compare.md"
}

# ---- onnx-export: every zoo model written by `cnnergy export-onnx`, run by ONNX Runtime's CPU provider
# against our importer + CPU backend (`infer MODEL.onnx --inputs`) and the zoo model itself; then the
# import time of the AlexNet and VGG-16 files (target: 100 MB in < 2 s). CPU only: no GPU is used.
run_onnx_export() {
  local py=/opt/torch/.venv/bin/python; [ -x "$py" ] || py=python3
  local oc="$CARRY/onnxruntime_check.py" it="$CARRY/onnx_import_time.py"
  [ -f "$oc" ] || { oc=bench/onnxruntime_check.py; it=bench/onnx_import_time.py; }
  timeout "${ORT_TIMEOUT:-420}" "$py" "$oc" "$CARRY" --zoo ${ONNX_MODELS:+--models "$ONNX_MODELS"} --work /tmp/onnx_export \
    --json "$OUT/onnxruntime_check.json" 2>&1 | tee "$OUT/onnxruntime_check.log"
  timeout 150 "$py" "$it" "$CARRY" --work /tmp/onnx_import --json "$OUT/onnx_import_time.json" 2>&1 \
    | tee "$OUT/onnx_import_time.log"
}

# ---- onnx-gpu: torchvision models exported by PyTorch, run by `cnnergy infer MODEL.onnx` on the GPU in
# fp32 and bf16 and on the CPU: fp32 GPU vs CPU <= 1e-4 x max |logit|, bf16 top-1 agreement >= 99 %,
# PyTorch's CPU logits vs ours as a sanity check (bench/onnx_gpu_check.py). ONNX_GPU_MODELS picks the
# models, ONNX_GPU_INPUTS (1000) the images per model, ONNX_GPU_COUNT (256) those the CPU runs see,
# ONNX_GPU_BUDGET_S (420) when no new model starts.
run_onnx_gpu() {
  gpu_info
  local py=/opt/torch/.venv/bin/python; [ -x "$py" ] || py=python3
  local gc="$CARRY/onnx_gpu_check.py"; [ -f "$gc" ] || gc=bench/onnx_gpu_check.py
  timeout "${ONNX_GPU_TIMEOUT:-560}" "$py" "$gc" --build "$CARRY" ${ONNX_GPU_MODELS:+--models "$ONNX_GPU_MODELS"} \
    --inputs "${ONNX_GPU_INPUTS:-1000}" --count "${ONNX_GPU_COUNT:-256}" --budget-s "${ONNX_GPU_BUDGET_S:-420}" \
    --work /tmp/onnx_gpu --json "$OUT/onnx_gpu_check.json" 2>&1 | tee "$OUT/onnx_gpu_check.log"
}

# ---- onnx-trained: the same bf16 / fp32 targets on TRAINED weights (bench/onnx_trained_check.py): each
# torchvision model trained ~10 s by PyTorch on Fashion-MNIST (needs the data set: pack with
# CNNERGY_PACK_DATA=12000: the test set and 12,000 training images; the full set does not fit beside the binaries), exported, run by `cnnergy infer`
# on the GPU in fp32 and bf16 on 1000 test images and 1000 random inputs, against PyTorch's fp32 and
# beside PyTorch's own autocast bf16. ONNX_TRAINED_MODELS picks the models, ONNX_TRAINED_TRAIN_S (10)
# the training seconds per model, ONNX_TRAINED_BUDGET_S (400) when no new model starts,
# ONNX_TRAINED_TIMEOUT (540 s) caps the whole check (every cnnergy process ends 15 s before it).
run_onnx_trained() {
  gpu_info
  local py=/opt/torch/.venv/bin/python; [ -x "$py" ] || py=python3
  local gc="$CARRY/onnx_trained_check.py"; [ -f "$gc" ] || gc=bench/onnx_trained_check.py
  local limit=${ONNX_TRAINED_TIMEOUT:-540}
  ls /tmp/fmnist/*.gz >/dev/null 2>&1 || echo "onnx-trained: no Fashion-MNIST in /tmp/fmnist (pack with CNNERGY_PACK_DATA=12000)"
  timeout "$limit" "$py" "$gc" --build "$CARRY" --data /tmp/fmnist ${ONNX_TRAINED_MODELS:+--models "$ONNX_TRAINED_MODELS"} \
    --train-s "${ONNX_TRAINED_TRAIN_S:-10}" --budget-s "${ONNX_TRAINED_BUDGET_S:-400}" --hard-s "$((limit - 15))" \
    --work /tmp/onnx_trained --json "$OUT/onnx_trained_check.json" 2>&1 | tee "$OUT/onnx_trained_check.log"
}

# ---- infer-profile: where does one inference request's GPU time go, ours against PyTorch? ------------
# Nsight Compute (clocks left alone, caches as the request left them) over one request after the
# warm-up (`cnnergy infer --profile-range`, `peer_infer.py --profile-range`): ours with the fused
# epilogue on and off, PyTorch's eager graph and torch.compile reduce-overhead; then the same cells
# unprofiled for their throughput. PROFILE_MODEL (alexnet), PROFILE_BATCH (256), PROFILE_PRECISION (bf16).
run_infer_profile() {
  gpu_info
  NCU=$(command -v ncu || ls -d /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | sort -V | tail -1)
  [ -n "$NCU" ] || NCU=/usr/local/cuda/bin/ncu
  "$NCU" --version | tail -1 | tee "$OUT/ncu_version.txt"
  local m=${PROFILE_MODEL:-alexnet} b=${PROFILE_BATCH:-256} p=${PROFILE_PRECISION:-bf16} layout=nchw
  case $p in bf16|fp16) layout=nhwc ;; esac
  local pi="$CARRY/peer_infer.py"; [ -f "$pi" ] || pi=bench/peer_infer.py
  local one="--requests 3 --warmup 3 --windows 1 --window-s 0.2 --idle-s 0 --profile-range"
  kprof ours 90 cnnergy infer "$m" --precision "$p" --layout "$layout" --batch "$b" $one --json "$OUT/kprof_ours.json"
  kprof ours_unfused 90 cnnergy infer "$m" --precision "$p" --layout "$layout" --batch "$b" $one \
    --fuse-epilogue off --json "$OUT/kprof_ours_unfused.json"
  kprof graph 90 python3 "$pi" --models "$m" --precisions "$p" --batches "$b" --engines graph --requests 3 \
    --latency-s 0 --windows 1 --window-s 0.2 --profile-range --out "$OUT/kprof_graph.json"
  kprof reduce 200 python3 "$pi" --models "$m" --precisions "$p" --batches "$b" --engines reduce-overhead \
    --requests 3 --latency-s 0 --windows 1 --window-s 0.2 --profile-range --compile-timeout 180 \
    --out "$OUT/kprof_reduce.json"
  kprof_summary ours_vs_reduce ours reduce
  kprof_summary ours_vs_graph ours graph
  kprof_summary fused_vs_unfused ours ours_unfused
}

# ---- train-profile: where does one training step's GPU time go, ours (with and without the batch
# norm's fused residual add) against torch.compile? ----------------------------------------------
# Nsight Compute (clocks left alone, caches as the step left them) over the last timed step of
# PROFILE_MODEL (resnet50) at PROFILE_BATCH (256) in PROFILE_PRECISION (bf16; or tf32) NHWC, the peer
# channels-last: ours with --fuse-residual on and off,
# torch.compile's default mode (CUDA graphs would hide its kernels from the range); summaries by
# kernel category (bench/kernel_summary.py). PROFILE_UNFUSED=0 / PROFILE_PEER=0 leave out the
# unfused run / the peer (ours alone took 20 s on an H100).
run_train_profile() {
  gpu_info
  NCU=$(command -v ncu || ls -d /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | sort -V | tail -1)
  [ -n "$NCU" ] || NCU=/usr/local/cuda/bin/ncu
  "$NCU" --version | tail -1 | tee "$OUT/ncu_version.txt"
  local m=${PROFILE_MODEL:-resnet50} b=${PROFILE_BATCH:-256} p=${PROFILE_PRECISION:-bf16}
  local it="--iters 3 --warmup 3 --profile-range" ours
  case $p in bf16|tf32) ;; *) echo "train-profile: PROFILE_PRECISION must be bf16 or tf32 (NHWC), got '$p'" >&2; return 2 ;; esac
  ours=$(command -v bench_train_throughput)
  kprof ours 120 "$ours" --models "$m" --batches "$b" --precisions "$p" --layout nhwc --fuse-residual on $it \
    --out "$OUT/kprof_ours.json"
  if [ "${PROFILE_UNFUSED:-1}" = 1 ]; then
    kprof ours_unfused 120 "$ours" --models "$m" --batches "$b" --precisions "$p" --layout nhwc --fuse-residual off \
      $it --out "$OUT/kprof_ours_unfused.json"
    kprof_summary fused_vs_unfused ours ours_unfused
  fi
  if [ "${PROFILE_PEER:-1}" = 1 ]; then
    kprof compile 300 python3 "$CARRY/peer_pytorch.py" --precisions "" --compile "$m:$b:$p" --compile-repeats 1 --channels-last on $it \
      --out "$OUT/kprof_compile.json"
    kprof_summary ours_vs_compile ours compile
  fi
  # Ours alone: its categories, for setting against a profile from another machine or day.
  local ks=$CARRY/kernel_summary.py; [ -f "$ks" ] || ks=bench/kernel_summary.py
  python3 "$ks" "$OUT/kprof_ours.csv" --json "$OUT/kprof_ours.json.summary" > "$OUT/kprof_ours.txt" 2>&1 || true
  rm -f "$OUT"/kprof_*.ncu-rep  # the CSVs hold every kernel's time; the reports are too large to come back
}

# ---- train-energy: images/s, joules per image and peak memory of our training step against the best
# PyTorch mode, cell by cell, in the same call (the training targets) ---------------------------------
# Ours: GRAPH_MODELS (default resnet50,resnet34) replayed as CUDA graphs, EAGER_MODELS (default
# vgg16,alexnet: dropout) without, at BATCHES (64,256; VGG-16 at VGG_BATCH, 128) in PRECISION (bf16),
# then WINDOWS (3) energy windows of WINDOW_S (3) s each. The peer: the same cells in MODES
# (reduce-overhead for ResNets, PEER_EAGER_MODES=compile,reduce-overhead for the others), each compiled
# cell once (COMPILE_REPEATS=1), energy through cnnergy's Python windows (the same counter). PART=ours,
# peer or both (default) splits the work over two calls on the same warm machine.
run_train_energy() {
  gpu_info
  local prec=${PRECISION:-bf16} batches=${BATCHES:-64,256} vb=${VGG_BATCH:-128} gm=${GRAPH_MODELS-resnet50,resnet34}
  local em=${EAGER_MODELS-vgg16,alexnet} part=${PART:-both}
  local it="--iters ${ITERS:-30} --warmup ${WARMUP:-5}" win="--windows ${WINDOWS:-3} --window-s ${WINDOW_S:-3}"
  local pywin="$win --cnnergy-python $CARRY/python --compile-repeats ${COMPILE_REPEATS:-1}"
  if [ "$part" != peer ]; then
    [ -n "$gm" ] && timeout 400 bench_train_throughput --models "$gm" --batches "$batches" --precisions "$prec"       --cuda-graph on $it $win --out "$OUT/ours_graph.json" 2>&1 | grep -v "^    first step"
    for m in ${em//,/ }; do
      local b=$batches; [ "${m#vgg}" != "$m" ] && b=$vb
      timeout 300 bench_train_throughput --models "$m" --batches "$b" --precisions "$prec" $it $win \
        --out "$OUT/ours_$m.json" 2>&1 | grep -v "^    first step"
    done
  fi
  if [ "$part" != ours ]; then
    [ -n "$gm" ] && timeout 520 python3 "$CARRY/peer_pytorch.py" --models "$gm" --batches "$batches" \
      --precisions "$prec" --modes "${MODES:-reduce-overhead}" $it $pywin --out "$OUT/peer_graph.json" 2>&1
    for m in ${em//,/ }; do
      local b=$batches; [ "${m#vgg}" != "$m" ] && b=$vb
      timeout 520 python3 "$CARRY/peer_pytorch.py" --models "$m" --batches "$b" --precisions "$prec" \
        --modes "${PEER_EAGER_MODES:-compile,reduce-overhead}" $it $pywin --out "$OUT/peer_$m.json" 2>&1
    done
  fi
  local o p; o=$(ls "$OUT"/ours_*.json 2>/dev/null); p=$(ls "$OUT"/peer_*.json 2>/dev/null)
  [ -n "$o" ] && [ -n "$p" ] && python3 "$CARRY/compare_throughput.py" --ours $o --peer $p | tee "$OUT/compare.md"
  return 0
}

"run_${mode//-/_}"
