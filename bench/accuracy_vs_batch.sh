#!/usr/bin/env bash
# Accuracy against batch size (Castro et al. 2019, Section 8.5): trains ResNet-34 (their ResNetIm,
# here on 1x28x28 Fashion-MNIST with 10 classes) at batch 64, 128 and 256 for the same epoch budget on the GPU
# and reports accuracy, time and energy side by side. Usage: accuracy_vs_batch.sh OUTDIR [DATA] [EPOCHS]
set -euo pipefail
out=$1; data=${2:-fashion-mnist}; epochs=${3:-3}
mkdir -p "$out"
for b in 64 128 256; do
  cnnergy train --model resnet34 --input 1x28x28 --classes 10 --data "$data" --device cuda --precision bf16 \
    --layout nhwc --batch "$b" --epochs "$epochs" --lr 0.05 --json "$out/acc_batch$b.json" | tail -n 3
done
python3 - "$out" <<'PY'
import json, sys, glob
rows = []
for f in sorted(glob.glob(sys.argv[1] + "/acc_batch*.json")):
    r = json.load(open(f)); e = r["epochs"][-1]
    j = sum(x["joules"] or 0 for x in r["epochs"]); s = sum(x["seconds"] for x in r["epochs"])
    rows.append((r["batch"], e["top1"], e["top5"], s, j))
print(f"{'batch':>6} {'top-1':>7} {'top-5':>7} {'train s':>8} {'train J':>9}")
for b, t1, t5, s, j in sorted(rows):
    print(f"{b:6d} {t1*100:6.2f}% {t5*100:6.2f}% {s:8.2f} {j:9.1f}")
json.dump([dict(batch=b, top1=t1, top5=t5, seconds=s, joules=j) for b, t1, t5, s, j in sorted(rows)],
          open(sys.argv[1] + "/accuracy_vs_batch.json", "w"), indent=1)
PY
