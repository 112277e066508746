#!/usr/bin/env bash
# Shared set-up for run.sh and test.sh: install missing Debian packages (when we can), configure and
# build. Sourced, not run. Honours CNNERGY_BUILD_DIR (default build/release) and CNNERGY_JOBS.
set -euo pipefail
repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${CNNERGY_BUILD_DIR:-$repo_root/build/release}
jobs=${CNNERGY_JOBS:-$(nproc)}

# Debian packages the build and tests need; dataset-fashion-mnist is the real data for training.
packages=(cmake g++ make pkg-config libgtest-dev libopenblas-dev libsqlite3-dev libjpeg-dev libpng-dev
          dataset-fashion-mnist openmpi-bin libopenmpi-dev chromium
          libcli11-dev
          libdnnl-dev  # oneDNN: the CPU convolution's forward pass (without it, OpenBLAS im2col)
          pybind11-dev python3-dev
          python3-build python3-venv python3-wheel python3-setuptools python3-pip  # the wheel (pyproject.toml)
          libonnx-dev libprotobuf-dev protobuf-compiler libonnx-testdata python3-onnx
          python3-torch python3-torchvision  # torchvision models exported to ONNX, logits compared
          slurm-wlm munge prometheus dpkg-dev)  # tests/cluster: a real Slurm and Prometheus, the .deb
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    echo "cnnergy setup: installing ${missing[*]}"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  elif command -v sudo >/dev/null; then
    sudo apt-get update -qq >/dev/null
    sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "cnnergy setup: missing packages ${missing[*]} and no way to install them; trying anyway" >&2
  fi
fi

cmake_args=(-S "$repo_root" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release)
[ -n "${CNNERGY_CUDA:-}" ] && cmake_args+=(-DCNNERGY_CUDA="$CNNERGY_CUDA")
[ -n "${CUDA_ARCH:-}" ] && cmake_args+=(-DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCH")
cmake "${cmake_args[@]}" >/dev/null
cmake --build "$build_dir" -j "$jobs"
