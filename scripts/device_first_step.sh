#!/usr/bin/env bash
# Time to first step on a lent GPU (issue 16): for each model:batch:precision cell, cnnergy's first
# run (empty algorithm cache), its second run (the cache the first one wrote) and PyTorch with
# cudnn.benchmark (bench/peer_pytorch.py), each cell its own process, 10 warm-up iterations on both
# sides; prints a table of the times from model build to the first timed iteration and the search
# times. Reads only: no GPU setting is changed. Results (JSON, logs, table) under $OUT.
#
# The default cells are a representative subset that fits in about 8 minutes on an H100 (the
# issue's worst cells, VGG-16 b128 bf16/fp32 and ResNet-50 b256 bf16, plus one small and one mid
# cell): CELLS="resnet50:128:bf16 ..." overrides it. A cell that runs past its limit is marked, and
# no new cell starts after BUDGET_S seconds (default 420).
# Usage: scripts/device_first_step.sh   (on the device, after scripts/pack_device.sh carried .carry/)
set -uo pipefail
if [ -f "$(dirname "$0")/device_env.sh" ] && [ -d "${CARRY:-$PWD/.carry}" ]; then
  source "$(dirname "$0")/device_env.sh"
fi
: "${OUT:=/tmp/out}"; mkdir -p "$OUT"
: "${CELLS:=resnet50:128:bf16 resnet50:256:bf16 vgg16:128:bf16 vgg16:128:fp32 resnet50:128:fp32 alexnet:256:bf16}"
: "${BUDGET_S:=420}" "${CELL_LIMIT_S:=150}" "${ITERS:=5}" "${WARMUP:=10}"
OURS=$(command -v bench_train_throughput || echo build/release/bin/bench_train_throughput)
PEER=${CARRY:-.carry}/peer_pytorch.py; [ -f "$PEER" ] || PEER=bench/peer_pytorch.py
CACHE=$(mktemp -d /tmp/cnnergy_algo_cache.XXXXXX)  # empty: the first run searches everything
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt" 2>&1
echo "GPU: $(cat "$OUT/gpu.txt"); algorithm cache $CACHE; warm-up $WARMUP, timed $ITERS"

for cell in $CELLS; do
  if [ "$SECONDS" -ge "$BUDGET_S" ]; then echo "budget of ${BUDGET_S}s spent: $cell and later cells not run"; break; fi
  IFS=: read -r m b p <<< "$cell"
  layout=nhwc; [ "$p" = fp32 ] && layout=nchw
  for run in first second; do
    timeout "$CELL_LIMIT_S" "$OURS" --models "$m" --batches "$b" --precisions "$p" --layout "$layout" \
      --algo auto --algo-cache "$CACHE" --iters "$ITERS" --warmup "$WARMUP" \
      --out "$OUT/ours_${run}_${m}_${b}_${p}.json" > "$OUT/ours_${run}_${m}_${b}_${p}.log" 2>&1
    echo "$cell cnnergy $run run: exit $? at ${SECONDS}s"
  done
  timeout "$CELL_LIMIT_S" python3 "$PEER" --models "$m" --batches "$b" --precisions "$p" --compile "" \
    --iters "$ITERS" --warmup "$WARMUP" --out "$OUT/peer_${m}_${b}_${p}.json" > "$OUT/peer_${m}_${b}_${p}.log" 2>&1
  echo "$cell PyTorch: exit $? at ${SECONDS}s"
done

python3 - "$OUT" "$CELLS" <<'EOF' | tee "$OUT/first_step.txt"
import json, os, sys
out, cells = sys.argv[1], sys.argv[2].split()
def cell(path):
    try:
        r = json.load(open(path))["results"][0]
        return r if r.get("status") == "ok" else None
    except Exception:
        return None
print(f"{'model':9} {'batch':>5} {'prec':5} | {'1st run s':>9} {'search s':>8} | {'2nd run s':>9} {'search s':>8} {'cached':>6}"
      f" | {'PyTorch s':>9} | {'1st/PT':>6} {'target':>6} | {'2nd search<=0.5':>15}")
for c in cells:
    m, b, p = c.split(":")
    f = cell(f"{out}/ours_first_{m}_{b}_{p}.json")
    s = cell(f"{out}/ours_second_{m}_{b}_{p}.json")
    t = cell(f"{out}/peer_{m}_{b}_{p}.json")
    fmt = lambda r, k: f"{r[k]:.2f}" if r and k in r else "-"
    ratio = f"{f['first_step_s'] / t['first_step_s']:.2f}" if f and t else "-"
    ok = ("yes" if f["first_step_s"] <= 1.5 * t["first_step_s"] else "NO") if f and t else "-"
    ok2 = ("yes" if s["algo_search_s"] <= 0.5 else "NO") if s else "-"
    print(f"{m:9} {b:5} {p:5} | {fmt(f, 'first_step_s'):>9} {fmt(f, 'algo_search_s'):>8} | "
          f"{fmt(s, 'first_step_s'):>9} {fmt(s, 'algo_search_s'):>8} {(s or {}).get('algo_cached', '-'):>6} | "
          f"{fmt(t, 'first_step_s'):>9} | {ratio:>6} {ok:>6} | {ok2:>15}")
EOF
rm -rf "$CACHE"
