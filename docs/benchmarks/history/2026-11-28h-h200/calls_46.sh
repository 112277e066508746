#!/usr/bin/env bash
# Call 46 (nvidia-h200): Nsight Compute kernel time of one training step, ours against torch.compile
# (default mode, channels-last), tf32 NHWC: ResNet-50 b256, then VGG-16 b128
# (scripts/device_run.sh train-profile, PROFILE_PRECISION=tf32, the unfused run left out). Reads only.
set -uo pipefail
cd "$(dirname "$0")"
: "${OUT:=/tmp/out}"; BASE=$OUT
OUT=$BASE/r50 PROFILE_PRECISION=tf32 PROFILE_UNFUSED=0 PROFILE_MODEL=resnet50 PROFILE_BATCH=256 \
  timeout 330 bash scripts/device_run.sh train-profile 2>&1 | tail -25
OUT=$BASE/vgg PROFILE_PRECISION=tf32 PROFILE_UNFUSED=0 PROFILE_MODEL=vgg16 PROFILE_BATCH=128 \
  timeout 250 bash scripts/device_run.sh train-profile 2>&1 | tail -25
