#!/usr/bin/env bash
# The main job: a sweep with its HTML report.
# * With a GPU: batch x precision sweep of ResNet-34 (Castro et al. 2019's ResNetIm), every trial metered.
# * Without one: a CPU sweep of LeNet-5 over the batch size, with Fashion-MNIST accuracy per trial,
#   plus a power-limit sweep on the SIMULATED GPU (the fake NVML device the project builds), so the
#   energy side of the tool can be seen working; its numbers are simulated, and labelled so.
# Results go to ./results (databases and reports). Extra arguments go to the sweep.
set -euo pipefail
build_dir=$1; shift
bin="$build_dir/bin"
out=${CNNERGY_RESULTS:-results}
mkdir -p "$out"
# Each run of the main job is a new measurement: --new stores it beside earlier runs in the same database
# (a sweep refuses to run again without --resume or --new); --resume in the extra arguments continues one.
fresh=(--new)
for a in "$@"; do [ "$a" = --resume ] && fresh=(); done
if [ "$("$bin/cnnergy" devices --count-cuda 2>/dev/null || echo 0)" -gt 0 ] && "$bin/cnnergy" --version | grep -qv "not built"; then
  echo "== cnnergy main job: ResNet-34 batch x precision sweep on the GPU =="
  "$bin/cnnergy" sweep --model resnet34 --batch 64,128,256 --precision fp32,bf16 --layout nhwc --window-s 2 \
    --db "$out/resnet34_sweep.db" --report "$out/resnet34_sweep.html" "${fresh[@]}" "$@"
else
  echo "== cnnergy main job (no GPU here): LeNet-5 batch sweep on the CPU with Fashion-MNIST accuracy =="
  "$bin/cnnergy" sweep --model lenet5 --device cpu --batch 32,64,128 --window-s 1 --windows 3 \
    --accuracy-data fashion-mnist --accuracy-epochs 1 \
    --db "$out/lenet5_cpu_sweep.db" --report "$out/lenet5_cpu_sweep.html" "${fresh[@]}" "$@"
  echo
  echo "== power-limit sweep on a SIMULATED GPU (fake NVML device: numbers are simulated, not measured) =="
  sim=$(mktemp -d)
  echo 0 > "$sim/load"
  CNNERGY_NVML_LIBRARY="$build_dir/lib/libnvidia-ml-fake.so" CNNERGY_FAKE_NVML_GPUS=1 \
  CNNERGY_FAKE_NVML_STATE="$sim/state" CNNERGY_FAKE_NVML_LOAD_FILE="$sim/load" CNNERGY_JOURNAL="$sim/journal.json" \
    "$bin/cnnergy" sweep --power-limit all:50 --warmup 1 --window-s 1 --min-iters 1 --windows 3 --new \
      --db "$out/simulated_power_sweep.db" --report "$out/simulated_power_sweep.html" -- "$bin/cnnergy-sim-job" --gcycles 0.5
  rm -rf "$sim"
fi
echo "results and reports in $out/"
