#!/usr/bin/env bash
# The training table on a lent GPU machine: cells (model x precision x batch), ours
# (bench_train_throughput, energy windows) and the PyTorch peer (bench/peer_pytorch.py, torch.compile
# in PEER_MODES) on the same GPU in the same call. Each GPU runs its own queue of units, pinned to its
# share of the CPU cores (the cores split evenly among the queues); a unit is one model and precision: ours at
# all its batches (one process), then the peer at each batch. Run after scripts/pack_device.sh, from
# the repository root on the device (the `run` tool's carry: .carry). Only reads GPU settings.
# Env: CALL (tag), Q0 ... Q7 (the queues of GPUs 0-7: "model:precision:batches:graph[:est_s[:repeats]] ...",
# graph on|off: --cuda-graph, off for models with dropout; repeats: the peer's --compile-repeats for
# this unit, PEER_REPEATS where not given; the CPU cores are split evenly among the
# queues given, so a four-GPU machine runs four units at once), DEADLINE_S (seconds: a unit whose estimate
# does not fit is skipped, and every process is cut at the deadline, so the call ends in time),
# PEER_MODES (default reduce-overhead), PEER_REPEATS (--compile-repeats, default 1), PEER_TIMEOUT_S (the most
# seconds one peer process may take, default 240: fp32 VGG-16 b128 needs about 330).
# Everything lands in ONE archive, $OUT/$CALL.tgz, rewritten after every process (a device call brings
# back only a few files, and a call cut short still brings back what finished), with table.md from
# bench/compare_throughput.py (--targets 1.15,0.85,1.0) at the end.
# Fresh torch.compile of a cell takes 25-110 s (ResNet-50 fp32 b256 the longest) and fp32 VGG-16's
# about 300 s: give that one its own call.
set -uo pipefail
cd "$(dirname "$0")/.."
CALL=${CALL:-x}
# Binaries packed as one xz archive (where the carry is short of room) are unpacked first.
[ -f .carry/bin.tar.xz ] && tar -xJf .carry/bin.tar.xz -C .carry
source scripts/device_env.sh
: "${OUT:=/tmp/out}"; R=/tmp/res/$CALL; rm -rf $R; mkdir -p "$R" "$OUT"
# One archive, rewritten after every process: a call cut short still brings back what finished.
save() { tar -czf "$OUT/.$CALL.$BASHPID.tgz" -C /tmp/res $CALL && mv -f "$OUT/.$CALL.$BASHPID.tgz" "$OUT/$CALL.tgz"; }
left() { local l=$((DEADLINE_S - (SECONDS - T0))); (( l < 1 )) && l=1; (( l > $1 )) && echo $1 || echo $l; }
nvidia-smi --query-gpu=index,name,driver_version,power.limit,clocks.max.sm,memory.total,pci.bus_id --format=csv > $R/gpu.txt
nvidia-smi topo -m > $R/topo.txt 2>&1; nproc >> $R/topo.txt
ncpu=$(nproc)
T0=$SECONDS; DEADLINE_S=${DEADLINE_S:-560}
run_queue() {  # gpu, cores, units...
  local g=$1 cores=$2; shift 2
  export CUDA_VISIBLE_DEVICES=$g
  for unit in "$@"; do
    IFS=: read -r m p bs cg est rep <<< "$unit"
    est=${est:-120}
    if (( SECONDS - T0 + est > DEADLINE_S )); then echo "gpu$g skip $unit t=$((SECONDS-T0))" >> $R/queue.log; continue; fi
    echo "gpu$g start $unit t=$((SECONDS-T0))" >> $R/queue.log
    taskset -c $cores timeout $(left 300) bench_train_throughput --models $m --batches $bs --precisions $p --cuda-graph $cg \
      --algo-cache /tmp/algo_gpu$g --iters 30 --warmup 5 --windows 3 --window-s 3 \
      --out $R/ours_${m}_${p}_b${bs//,/_}.json > $R/ours_${m}_${p}_b${bs//,/_}.log 2>&1
    echo "gpu$g ours $m $p rc=$? t=$((SECONDS-T0))" >> $R/queue.log; save
    local cl=auto; [ $p = tf32 ] && cl=on; [ $p = fp32 ] && cl=off
    for b in ${bs//,/ }; do
      (( $(left ${PEER_TIMEOUT_S:-240}) < 30 )) && { echo "gpu$g peer $m $b $p skipped: too little time t=$((SECONDS-T0))" >> $R/queue.log; continue; }
      taskset -c $cores timeout $(left ${PEER_TIMEOUT_S:-240}) python3 .carry/peer_pytorch.py --models $m --batches $b --precisions $p --compile "" \
        --modes ${PEER_MODES:-reduce-overhead} --compile-repeats ${rep:-${PEER_REPEATS:-1}} --channels-last $cl --cnnergy-python .carry/python --nvml-index $g \
        --iters 30 --warmup 5 --windows 3 --window-s 3 --out $R/peer_${m}_b${b}_${p}.json > $R/peer_${m}_b${b}_${p}.log 2>&1
      echo "gpu$g peer $m $b $p rc=$? t=$((SECONDS-T0))" >> $R/queue.log; save
    done
  done
  echo "gpu$g done t=$((SECONDS-T0))" >> $R/queue.log
}
# The queues given (Q0 ... Q7), each on its GPU and its even share of the cores.
gpus=(); for g in 0 1 2 3 4 5 6 7; do q=Q$g; [ -n "${!q:-}" ] && gpus+=($g); done
(( ${#gpus[@]} == 0 )) && { echo "train_table_device.sh: no queue given (Q0 ... Q7)" >&2; exit 2; }
per=$((ncpu / ${#gpus[@]})); (( per < 1 )) && per=1
i=0
for g in "${gpus[@]}"; do
  q=Q$g; first=$(((i * per) % ncpu)); run_queue $g $first-$((first + per - 1)) ${!q} &
  i=$((i + 1))
done
wait
ours=$(ls $R/ours_*.json 2>/dev/null); peers=$(ls $R/peer_*.json 2>/dev/null)
[ -n "$ours" ] && [ -n "$peers" ] && python3 .carry/compare_throughput.py --ours $ours --peer $peers --targets 1.15,0.85,1.0 > $R/table.md
save
cat $R/queue.log; cat $R/table.md 2>/dev/null
for f in $R/ours_*.log; do grep -E "^[a-z0-9]+ +[0-9]+ |energy \(|memory held" $f | head -12; done
for f in $R/peer_*.log; do tail -2 $f; done
