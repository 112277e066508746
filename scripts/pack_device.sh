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
cmake --build "$build" -j "${CNNERGY_JOBS:-2}" --target cnnergy bench_train_throughput test_backend_cuda cnnergy_api \
  ${CNNERGY_EXTRA_TARGETS:-}
out=$repo/.carry
rm -rf "$out"; mkdir -p "$out/bin" "$out/lib" "$out/data"
for b in "$build"/bin/* "$build"/tests/backend_cuda/test_backend_cuda ${CNNERGY_EXTRA_BINS:-}; do
  [ -f "$b" ] && [ -x "$b" ] && cp "$b" "$out/bin/" && strip --strip-unneeded "$out/bin/$(basename "$b")" 2>/dev/null || true
done
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
  cp -L "$build/lib/libcnnergy.so.1" "$out/python/cnnergy/" && strip --strip-unneeded "$out/python/cnnergy/libcnnergy.so.1"
fi
# Fashion-MNIST (30 MB) for the GPU training tests; CNNERGY_PACK_DATA=0 leaves it out (the tree that
# travels is capped at 64 MiB, and the Open MPI runtime below needs room too).
[ "${CNNERGY_PACK_DATA:-1}" = 1 ] && cp /usr/share/datasets/fashion-mnist/*.gz "$out/data/" 2>/dev/null || true
cp "$repo"/bench/*.py "$repo"/bench/*.sh "$out/"; cp "$repo"/scripts/device_*.sh "$out/" 2>/dev/null || true
# OpenBLAS alone is 36 MB: the libraries travel xz-compressed (the tree that travels is capped at 64 MiB).
tar -cJf "$out/lib.tar.xz" -C "$out/lib" . && rm -rf "$out/lib"
du -sh "$out"; du -sh "$out"/*
[ "${CNNERGY_PACK_MPI:-1}" = 0 ] || "$repo/scripts/pack_openmpi.sh" || echo "pack_device: scripts/pack_openmpi.sh failed: no .carry/openmpi.tar.xz (mpirun)" >&2
