#!/usr/bin/env bash
# Call 40 (nvidia-h200-x2): the pool's ReLU mask against the unmasked pair, ours only, in one process
# per GPU (bench_train_throughput --pool-relu-mask both, three rounds): speed and peak memory.
set -uo pipefail
cd "$(dirname "$0")"
[ -f .carry/bin.tar.xz ] && tar -xJf .carry/bin.tar.xz -C .carry && rm -f .carry/bin.tar.xz
source scripts/device_env.sh
: "${OUT:=/tmp/out}"; R=/tmp/res/ab; mkdir -p $R $OUT
ab() {  # gpu cores model precision batches
  for round in 1 2 3; do
    CUDA_VISIBLE_DEVICES=$1 taskset -c $2 timeout 150 bench_train_throughput --models $3 --precisions $4 --batches $5 \
      --pool-relu-mask both --algo-cache /tmp/algo_gpu$1 --iters 30 --warmup 5 \
      --out $R/ab_$3_$4_r$round.json > $R/ab_$3_$4_r$round.log 2>&1
    echo "gpu$1 $3 $4 round $round rc=$? t=$SECONDS" >> $R/queue.log
  done
}
(ab 0 0-15 vgg16 fp32 128,64; ab 0 0-15 vgg16 bf16 128,64) &
(ab 1 16-31 alexnet fp32 256,64; ab 1 16-31 alexnet bf16 256,64) &
wait
cat $R/queue.log
tar -czf $OUT/ab.tgz -C /tmp/res ab
grep -h -E "^[a-z0-9]+ +[0-9]+ |ReLU mask" $R/ab_*_r1.log
