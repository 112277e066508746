#!/usr/bin/env bash
# Time to first step on a lent GPU, model by model: for each model and precision, cnnergy's
# first run of each batch (its own process, an algorithm cache holding nothing for that problem), a
# second run of all the batches in one process on the cache the first runs wrote, and PyTorch with
# cudnn.benchmark (bench/peer_pytorch.py, all the batches in one process: only its first cell pays for
# the CUDA context and loads cuDNN's kernels, which makes the comparison stricter for us; PEER_PER_CELL=1
# gives each batch its own process, as ours has). 10 warm-up iterations on both sides;
# the timed iterations after them give each cell's throughput too. Prints a table of the times from
# model build to the first timed iteration, the search times and the search's stages (from
# CNNERGY_SEARCH_TRACE), and writes it with one JSON of every cell. Reads only: no GPU setting changes.
# Usage (on the device, after scripts/pack_device.sh carried .carry/):
#   MODELS=resnet50,vgg16 PRECISIONS=bf16,fp32 BATCHES=64,128,256 scripts/device_first_step.sh
# No new model starts after BUDGET_S seconds (default 500); a process past CELL_LIMIT_S is stopped.
# The table and first_step.json go to $OUT; logs and per-cell JSON stay in $WORK (default /tmp/fs).
set -uo pipefail
if [ -f "$(dirname "$0")/device_env.sh" ] && [ -d "${CARRY:-$PWD/.carry}" ]; then
  source "$(dirname "$0")/device_env.sh"
fi
: "${OUT:=/tmp/out}" "${WORK:=/tmp/fs}"; mkdir -p "$OUT" "$WORK"
: "${MODELS:=resnet50,vgg16}" "${PRECISIONS:=bf16,fp32}" "${BATCHES:=64,128,256}"
: "${BUDGET_S:=500}" "${HARD_S:=570}" "${CELL_LIMIT_S:=150}" "${ITERS:=3}" "${WARMUP:=10}"
# Each process's limit: CELL_LIMIT_S, cut to what is left before HARD_S (the device call's own limit
# less the summary), so that the table of what finished always gets written.
limit() { local left=$((HARD_S - SECONDS)); [ "$left" -lt 1 ] && left=1; [ "$left" -lt "${1:-$CELL_LIMIT_S}" ] && echo "$left" || echo "${1:-$CELL_LIMIT_S}"; }
OURS=$(command -v bench_train_throughput || echo build/release/bin/bench_train_throughput)
PEER=${CARRY:-.carry}/peer_pytorch.py; [ -f "$PEER" ] || PEER=bench/peer_pytorch.py
PY=${PYTHON:-python3}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$WORK/gpu.txt" 2>&1
echo "GPU: $(cat "$WORK/gpu.txt"); warm-up $WARMUP, timed $ITERS; models $MODELS; precisions $PRECISIONS; batches $BATCHES"

summarize() {
"$PY" - "$WORK" "$OUT" "$MODELS" "$PRECISIONS" "$BATCHES" <<'EOF' | tee "$OUT/first_step.txt"
import json, re, sys
work, out, models, precs, batches = sys.argv[1], sys.argv[2], *[a.split(",") for a in sys.argv[3:6]]
def results(path):
    try:
        return json.load(open(path))["results"]
    except Exception:
        return []
def find(rs, b):
    for r in rs:
        if int(r.get("batch", -1)) == int(b):
            return r if r.get("status") == "ok" else {"status": r.get("status", "failed"), "error": r.get("error", "")}
    return None
def stages(log):  # search trace stage totals, seconds
    tot = {}
    try:
        for line in open(log, errors="replace"):
            mt = re.match(r"search trace: (\S+)\s.*?\s([\d.]+) ms", line)
            if mt:
                tot[mt.group(1)] = tot.get(mt.group(1), 0.0) + float(mt.group(2)) / 1e3
    except OSError:
        pass
    return {k: round(v, 3) for k, v in tot.items()}
cells = []
print(f"{'model':12} {'prec':4} {'batch':>5} | {'1st s':>6} {'search':>6} {'find':>5} {'graph':>5} {'cost':>5} | "
      f"{'2nd s':>6} {'search':>6} | {'PyTorch s':>9} | {'1st/PT':>6} {'<=1.5':>5} | {'img/s':>8} {'PT img/s':>8}")
for m in models:
    for p in precs:
        second, peer = results(f"{work}/ours_second_{m}_{p}.json"), results(f"{work}/peer_{m}_{p}.json")
        for b in batches:
            f = find(results(f"{work}/ours_first_{m}_{p}_{b}.json"), b)
            s, t = find(second, b), find(peer, b) or find(results(f"{work}/peer_{m}_{p}_{b}.json"), b)
            st = stages(f"{work}/ours_first_{m}_{p}_{b}.log")
            ok = lambda r: r is not None and r.get("status") == "ok"
            c = {"model": m, "precision": p, "batch": int(b), "peer_process": "per cell" if find(peer, b) is None else "per model and precision",
                 "first": f, "second": s, "pytorch": t, "search_stages_s": st}
            if ok(f) and ok(t):
                c["first_over_pytorch"] = f["first_step_s"] / t["first_step_s"]
                c["target_met"] = c["first_over_pytorch"] <= 1.5
            if ok(s):
                c["second_search_ok"] = s["algo_search_s"] <= 0.5
            cells.append(c)
            g = lambda r, k, w=6, d=2: f"{r[k]:{w}.{d}f}" if ok(r) and k in r else f"{'-' if r is None else r.get('status','-')[:w]:>{w}}"
            print(f"{m:12} {p:4} {b:>5} | {g(f,'first_step_s')} {g(f,'algo_search_s')} "
                  f"{st.get('auto:find', 0):5.2f} {st.get('auto:graph_find', 0):5.2f} {st.get('auto:costing', 0):5.2f} | "
                  f"{g(s,'first_step_s')} {g(s,'algo_search_s')} | {g(t,'first_step_s',9)} | "
                  f"{c.get('first_over_pytorch', float('nan')):6.2f} {('yes' if c.get('target_met') else 'NO') if 'target_met' in c else '-':>5} | "
                  f"{g(f,'images_per_s',8,0)} {g(t,'images_per_s',8,0)}")
met = [c for c in cells if "target_met" in c]
print(f"\n{sum(c['target_met'] for c in met)} of {len(met)} measured cells within 1.5x PyTorch "
      f"(of {len(cells)} cells); second-run search <= 0.5 s in "
      f"{sum(bool(c.get('second_search_ok')) for c in cells)} of {sum('second_search_ok' in c for c in cells)}; "
      f"GPU: {open(work + '/gpu.txt').read().strip()}")
json.dump({"gpu": open(work + "/gpu.txt").read().strip(), "cells": cells}, open(f"{out}/first_step.json", "w"), indent=1)
EOF
}

for m in ${MODELS//,/ }; do
  if [ "$SECONDS" -ge "$BUDGET_S" ]; then echo "budget of ${BUDGET_S}s spent: $m and later models not run"; break; fi
  for p in ${PRECISIONS//,/ }; do
    cache=$(mktemp -d /tmp/cnnergy_algo_cache.XXXXXX)  # empty: each batch's first run searches all its problems
    for b in ${BATCHES//,/ }; do
      CNNERGY_SEARCH_TRACE=1 timeout "$(limit)" "$OURS" --models "$m" --batches "$b" --precisions "$p" \
        --algo auto --algo-cache "$cache" --iters "$ITERS" --warmup "$WARMUP" \
        --out "$WORK/ours_first_${m}_${p}_${b}.json" > "$WORK/ours_first_${m}_${p}_${b}.log" 2>&1
      echo "$m $p b$b cnnergy first run: exit $? at ${SECONDS}s"
    done
    timeout "$(limit)" "$OURS" --models "$m" --batches "$BATCHES" --precisions "$p" --algo auto \
      --algo-cache "$cache" --iters "$ITERS" --warmup "$WARMUP" \
      --out "$WORK/ours_second_${m}_${p}.json" > "$WORK/ours_second_${m}_${p}.log" 2>&1
    echo "$m $p cnnergy second run: exit $? at ${SECONDS}s"
    if [ "${PEER_PER_CELL:-0}" = 1 ]; then  # each batch its own process, paying its CUDA context as ours does
      for b in ${BATCHES//,/ }; do
        timeout "$(limit)" "$PY" "$PEER" --models "$m" --batches "$b" --precisions "$p" --compile "" \
          --iters "$ITERS" --warmup "$WARMUP" --out "$WORK/peer_${m}_${p}_${b}.json" > "$WORK/peer_${m}_${p}_${b}.log" 2>&1
        echo "$m $p b$b PyTorch: exit $? at ${SECONDS}s"
      done
    else
      timeout "$(limit $((CELL_LIMIT_S * 2)))" "$PY" "$PEER" --models "$m" --batches "$BATCHES" --precisions "$p" --compile "" \
        --iters "$ITERS" --warmup "$WARMUP" --out "$WORK/peer_${m}_${p}.json" > "$WORK/peer_${m}_${p}.log" 2>&1
      echo "$m $p PyTorch: exit $? at ${SECONDS}s"
    fi
    rm -rf "$cache"
    summarize > /dev/null  # the table so far, in case the call is cut short
  done
done
summarize

