#!/usr/bin/env bash
# Sourced on a lent GPU machine, in the repository root: unpacks the carried libraries and sets the
# paths (the device image's cuDNN is older; PyTorch's wheel carries the 9.19 we build against).
# Reads only: nothing here changes a GPU setting.
set -u
export CARRY=${CARRY:-$PWD/.carry}
mkdir -p /tmp/cnnergy_lib && tar -xJf "$CARRY/lib.tar.xz" -C /tmp/cnnergy_lib
[ -f "$CARRY/bin.tar.xz" ] && mkdir -p "$CARRY/bin" && tar -xJf "$CARRY/bin.tar.xz" -C "$CARRY/bin"
export LD_LIBRARY_PATH=/tmp/cnnergy_lib:/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cudnn/lib:${LD_LIBRARY_PATH:-}
export PATH=$CARRY/bin:$PATH
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
mkdir -p /tmp/fmnist && cp "$CARRY"/data/*.gz /tmp/fmnist/ 2>/dev/null || true
