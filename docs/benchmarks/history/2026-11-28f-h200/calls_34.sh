#!/usr/bin/env bash
# Call 34: the searches' workspace given back before the arena (test, then the fp32 peaks).
set -uo pipefail
cd "$(dirname "$0")"
[ -f .carry/bin.tar.xz ] && tar -xJf .carry/bin.tar.xz -C .carry
source scripts/device_env.sh
R=/tmp/res_w; rm -rf $R; mkdir -p $R; : "${OUT:=/tmp/out}"; mkdir -p "$OUT"
trap 'tar -czf "$OUT/res_w.tgz" -C $R .' EXIT
T0=$SECONDS
timeout 100 test_train_cuda --gtest_filter='*SearchWorkspace*:*ArenaWorkspaces*' > $R/test_train.log 2>&1; echo "test_train rc=$? t=$((SECONDS-T0))"
grep -E "^\[  (FAILED|SKIPPED|PASSED)|Failure|Expected|Which is|held after|search" $R/test_train.log | head -30
for spec in vgg16:fp32:64 alexnet:fp32:64,256 resnet34:fp32:64; do
  IFS=: read -r m p b <<< "$spec"
  l=$((250 - (SECONDS - T0))); (( l < 15 )) && break
  timeout $l bench_train_throughput --models $m --batches $b --precisions $p --cuda-graph off --iters 20 --warmup 3 --algo-cache off --out $R/$m.json > $R/$m.log 2>&1
  echo "$m rc=$? t=$((SECONDS-T0))"; grep -E "^$m +[0-9]|held after|algorithm search \(" $R/$m.log
done
