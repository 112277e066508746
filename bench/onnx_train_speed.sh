#!/usr/bin/env bash
# Training speed of imported ONNX networks (the import's target) on a lent GPU, read-only: exports
# torchvision's resnet50 and mobilenet_v2 (random weights, batch norm kept as BatchNormalization:
# the TorchScript exporter with constant folding off, so the graph trains like PyTorch's), trains
# each imported file with bench_train_throughput beside the zoo's resnet50 and beside PyTorch eager
# (bench/peer_pytorch.py) on the same batch and precision, and prints the ratios.
# Usage (device, after scripts/pack_device.sh): bash bench/onnx_train_speed.sh [BATCH] [PRECISION]
set -uo pipefail
: "${OUT:=/tmp/out}"; B=${1:-256}; P=${2:-bf16}; PY=${PYTHON:-/opt/torch/.venv/bin/python}
D=$OUT/onnx_train; mkdir -p "$D"
OURS=$(command -v bench_train_throughput || echo build/release/bin/bench_train_throughput)
PEER=${CARRY:-.carry}/peer_pytorch.py; [ -f "$PEER" ] || PEER=bench/peer_pytorch.py
"$PY" - "$D" <<'PYEOF'
import sys, torch, torchvision
d = sys.argv[1]
for name in ("resnet50", "mobilenet_v2"):
    m = getattr(torchvision.models, name)(num_classes=1000).eval()
    torch.onnx.export(m, torch.randn(1, 3, 224, 224), f"{d}/{name}.onnx", dynamo=False,
                      do_constant_folding=False, training=torch.onnx.TrainingMode.PRESERVE,
                      opset_version=17, input_names=["input"], output_names=["logits"])
    print("exported", name)
PYEOF
layout=nhwc; [ "$P" = fp32 ] && layout=nchw
timeout 240 "$OURS" --models "$D/resnet50.onnx,resnet50,$D/mobilenet_v2.onnx" --batches "$B" --precisions "$P" \
  --layout "$layout" --iters 20 --warmup 10 --out "$D/ours.json" > "$D/ours.log" 2>&1; tail -8 "$D/ours.log"
timeout 180 "$PY" "$PEER" --models resnet50,mobilenet_v2 --batches "$B" --precisions "$P" --compile "" \
  --iters 20 --warmup 10 --out "$D/peer.json" > "$D/peer.log" 2>&1; tail -4 "$D/peer.log"
"$PY" - "$D" <<'PYEOF'
import json, sys
d = sys.argv[1]
ours = {r["model"].rsplit("/", 1)[-1]: r for r in json.load(open(f"{d}/ours.json"))["results"]}
peer = {r["model"]: r for r in json.load(open(f"{d}/peer.json"))["results"]}
def ips(r): return r.get("images_per_s") if r and r.get("status", "ok") == "ok" else None
for name in ("resnet50", "mobilenet_v2"):
    imp, zoo, pt = ips(ours.get(name + ".onnx")), ips(ours.get(name)), ips(peer.get(name))
    print(f"{name:13s} imported {imp} img/s | zoo {zoo} | PyTorch eager {pt} | "
          f"imported/zoo {imp / zoo if imp and zoo else float('nan'):.3f} (target >= 1.0) | "
          f"imported/PyTorch {imp / pt if imp and pt else float('nan'):.3f} (target >= 1.15)")
PYEOF
