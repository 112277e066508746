#!/usr/bin/env bash
# The main job: train LeNet-5 on Fashion-MNIST on the best available device and print time and accuracy.
set -euo pipefail
build_dir=$1; shift
bin="$build_dir/bin/cnnergy"
device=cpu
if "$bin" devices --count-cuda 2>/dev/null | grep -q '^[1-9]'; then device=cuda; fi
echo "== cnnergy main job: LeNet-5 on Fashion-MNIST, device $device =="
exec "$bin" train --model lenet5 --data fashion-mnist --device "$device" --batch 64 --epochs 5 "$@"
