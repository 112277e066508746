#!/usr/bin/env bash
# Device call: convolution workspaces in the arena. Env: CALL (tag), MODES (tests bench peer extra).
set -uo pipefail
cd "$(dirname "$0")"
CALL=${CALL:-x}; MODES=${MODES:-tests bench peer}
[ -f .carry/bin.tar.xz ] && mkdir -p .carry && tar -xJf .carry/bin.tar.xz -C .carry
source scripts/device_env.sh
R=/tmp/res_$CALL; rm -rf $R; mkdir -p $R
: "${OUT:=/tmp/out}"; mkdir -p "$OUT"
trap 'tar -czf "$OUT/res_$CALL.tgz" -C $R .' EXIT
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm,memory.total,pci.bus_id --format=csv | tee $R/gpu.txt
gl() { grep -E "^\[  (FAILED|SKIPPED) |^\[  PASSED|tests ran|Failure|arena|shared workspace" "$1" | tail -${2:-25}; }
T0=$SECONDS
if [[ " $MODES " == *" tests "* ]]; then
  timeout 200 test_train_cuda --gtest_filter="${TF:-*:-*FashionMnist*}" > $R/test_train.log 2>&1; echo "test_train rc=$? t=$((SECONDS-T0))"; gl $R/test_train.log
  timeout 150 test_backend_cuda --gtest_filter="${BF:-*}" > $R/test_backend.log 2>&1; echo "test_backend rc=$? t=$((SECONDS-T0))"; gl $R/test_backend.log 12
fi
if [[ " $MODES " == *" bench "* ]]; then
  for spec in ${BM:-resnet50:bf16:256,64}; do
    IFS=: read -r m p b <<< "$spec"
    timeout 240 bench_train_throughput --models $m --batches $b --precisions $p --cuda-graph ${CG:-on} --workspace-in-arena ${WA:-both} \
      --iters 30 --warmup 5 --windows ${WIN:-3} --window-s 3 --out $R/ours_${m}_${p}.json > $R/ours_${m}_${p}.log 2>&1
    echo "bench $m $p rc=$? t=$((SECONDS-T0))"; grep -E "^$m|memory held|arena|energy \(" $R/ours_${m}_${p}.log
  done
fi
if [[ " $MODES " == *" peer "* ]]; then
  for spec in ${PM:-resnet50:bf16:256 resnet50:bf16:64}; do
    IFS=: read -r m p b <<< "$spec"
    timeout 300 python3 .carry/peer_pytorch.py --models $m --batches $b --precisions $p --compile "" --modes reduce-overhead --compile-repeats ${CR:-1} --cnnergy-python .carry/python \
      --iters 30 --warmup 5 --windows 3 --window-s 3 --out $R/peer_${m}_b${b}_${p}.json > $R/peer_${m}_b${b}_${p}.log 2>&1
    echo "peer $m $b $p rc=$? t=$((SECONDS-T0))"; tail -4 $R/peer_${m}_b${b}_${p}.log
  done
fi
echo "done t=$((SECONDS-T0))"
