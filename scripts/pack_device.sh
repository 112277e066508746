#!/usr/bin/env bash
# Builds for Hopper and packs what a lent GPU machine needs into .carry/ (git-ignored): the binaries,
# the shared libraries the device image lacks (OpenBLAS, SQLite, ...), Fashion-MNIST, the peer
# scripts and an Open MPI runtime (scripts/pack_openmpi.sh). Usage: scripts/pack_device.sh
# [build-dir]; CNNERGY_PACK_DATA=0 / CNNERGY_PACK_MPI=0 leave the data set / Open MPI out.
# Then run scripts/device_run.sh there.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$repo/build/device}
cmake -S "$repo" -B "$build" -DCMAKE_BUILD_TYPE=Release -DCNNERGY_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null
# Every GPU test binary, as the build lists them (gpu_tests.txt: the tests labelled gpu).
mapfile -t gpu_tests < "$build/gpu_tests.txt"
gpu_targets=(); for t in "${gpu_tests[@]}"; do [ -n "$t" ] && gpu_targets+=("$(basename "$t")"); done
cmake --build "$build" -j "${CNNERGY_JOBS:-2}" --target cnnergy bench_train_throughput cnnergy_api "${gpu_targets[@]}" \
  ${CNNERGY_EXTRA_TARGETS:-}
out=$repo/.carry
rm -rf "$out"; mkdir -p "$out/bin" "$out/lib" "$out/data"
for b in "$build"/bin/* "${gpu_tests[@]}" ${CNNERGY_EXTRA_BINS:-}; do
  [ -f "$b" ] && [ -x "$b" ] && cp "$b" "$out/bin/" && strip --strip-unneeded "$out/bin/$(basename "$b")" 2>/dev/null || true
done
printf '%s\n' "${gpu_targets[@]}" > "$out/gpu_tests.txt"
# Libraries outside glibc and CUDA that the binaries need.
for b in "$out"/bin/*; do ldd "$b" 2>/dev/null; done | awk '/=> \//{print $3}' | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|ld-linux*|libstdc++*|libgcc_s*) ;;
    libcud*|libcublas*|libnccl*|libnvidia*|libcupti*|libcufft*) ;;
    *) cp -L "$lib" "$out/lib/" ;;
  esac
done
[ -f "$build/lib/libnvidia-ml-fake.so" ] && cp "$build/lib/libnvidia-ml-fake.so" "$out/lib/" || true
# The Python package (pure Python, ctypes backend: the device's Python needs no compiler) with
# libcnnergy beside it, where the ctypes backend looks first; the extension is for this Python only.
if [ -d "$build/python/cnnergy" ]; then
  mkdir -p "$out/python/cnnergy"
  cp "$build"/python/cnnergy/*.py "$build"/python/cnnergy/*.pyi "$out/python/cnnergy/"
  mkdir -p "$out/python/cnnergy/integrations"
  cp "$build"/python/cnnergy/integrations/*.py "$out/python/cnnergy/integrations/"
  cp -L "$build/lib/libcnnergy.so.1" "$out/python/cnnergy/" && strip --strip-unneeded "$out/python/cnnergy/libcnnergy.so.1"
fi
# Fashion-MNIST (30 MB) for the GPU training tests; CNNERGY_PACK_DATA=0 leaves it out (the tree that
# travels is capped at 64 MiB, and the Open MPI runtime below needs room too); CNNERGY_PACK_DATA=N (a
# number > 1) packs the whole test set and the first N training images (valid IDX files, the count in
# the header cut to N; 12000 make about 10 MB), e.g. for bench/onnx_trained_check.py.
fmnist=/usr/share/datasets/fashion-mnist
case "${CNNERGY_PACK_DATA:-1}" in
  0) ;;
  1) cp "$fmnist"/*.gz "$out/data/" 2>/dev/null || true ;;
  *[!0-9]*) echo "pack_device: CNNERGY_PACK_DATA must be 0, 1 or a number of training images" >&2; exit 2 ;;
  *) cp "$fmnist"/t10k-*.gz "$out/data/"
     python3 - "$fmnist" "$out/data" "$CNNERGY_PACK_DATA" <<'PY'
import gzip, struct, sys
src, dst, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
for name, header, item in (("train-images-idx3-ubyte.gz", 16, 784), ("train-labels-idx1-ubyte.gz", 8, 1)):
    with gzip.open(f"{src}/{name}") as f:
        raw = f.read()
    count = min(n, struct.unpack(">I", raw[4:8])[0])
    with gzip.open(f"{dst}/{name}", "wb", compresslevel=9) as f:
        f.write(raw[:4] + struct.pack(">I", count) + raw[8:header] + raw[header:header + count * item])
PY
     ;;
esac
cp "$repo"/bench/*.py "$repo"/bench/*.sh "$out/"; cp "$repo"/scripts/device_*.sh "$out/" 2>/dev/null || true
# OpenBLAS alone is 36 MB: the libraries travel xz-compressed (the tree that travels is capped at 64 MiB).
tar -cJf "$out/lib.tar.xz" -C "$out/lib" . && rm -rf "$out/lib"
# The binaries too (the GPU test binaries carry their kernels for sm_90): device_env.sh unpacks them.
tar -cJf "$out/bin.tar.xz" -C "$out/bin" . && rm -rf "$out/bin"
du -sh "$out"; du -sh "$out"/*
[ "${CNNERGY_PACK_MPI:-1}" = 0 ] || "$repo/scripts/pack_openmpi.sh" || echo "pack_device: scripts/pack_openmpi.sh failed: no .carry/openmpi.tar.xz (mpirun)" >&2
tree_b=$(( $(du -sb "$out" | cut -f1) + $(git -C "$repo" ls-files -z | (cd "$repo" && xargs -0 du -cb 2>/dev/null) | tail -1 | cut -f1) ))
[ "$tree_b" -le $((64 * 1024 * 1024)) ] || echo "pack_device: .carry plus the tracked files are $((tree_b / 1048576)) MiB, over the 64 MiB that travels (CNNERGY_PACK_DATA=0 or =12000, fewer CNNERGY_EXTRA_TARGETS)" >&2
