#!/usr/bin/env python3
"""The throughput target of issue 16, every cell of the 2026-11-22 matrix (ResNet-50, ResNet-34,
VGG-16, AlexNet x 64/128/256 x fp32/tf32/bf16) against its newest measurement with the cheaper
search: tf32 from this directory's call 3 (after the TF32 rule), AlexNet fp32 b128 and ResNet-50
tf32 b256 reruns from call 1 where call 3 has none, fp32 and bf16 from 2026-11-26c (the search code
for fp32 without TF32 and for bf16 is unchanged since). Prints a markdown table.
Usage: python3 throughput_table.py (from this directory)."""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
REF = os.path.join(HERE, "..", "2026-11-22d-h200", "matrix.json")
EARLIER = os.path.join(HERE, "..", "2026-11-26c-h200")


def cells_of(path, label):
    out = {}
    for c in json.load(open(path))["cells"]:
        first = c.get("first") or {}
        if first.get("status") != "ok":
            continue
        peer = c.get("pytorch") or {}
        out[(c["model"], int(c["batch"]), c["precision"])] = (
            first["images_per_s"], peer.get("images_per_s") if peer.get("status") == "ok" else None, label)
    return out


now = {}
for name in ("first_step_call1.json", "first_step_call2.json", "first_step_call3.json", "first_step_call4.json"):
    now.update(cells_of(os.path.join(EARLIER, name), "26c " + name.split("_")[-1][:-5]))
for name in ("call1_alex.json", "call1_r50.json", "call3_tf32_after.json"):
    now.update(cells_of(os.path.join(HERE, name), "26d " + name[:-5]))

ref = {}
for c in json.load(open(REF))["cells"]:
    k = (c["model"], int(c["batch"]), c["precision"])
    # today's default is 10 candidates: a cell measured so is preferred, else the 4-candidate one
    if k not in ref or c.get("conv_search_candidates") == 10:
        ref[k] = c

print("| model | batch | prec | ours now img/s (measured) | 2026-11-22 img/s (call, candidates) | change | "
      "ours / PyTorch eager now | then |")
print("|---|---|---|---|---|---|---|---|")
below, missing, rows = [], [], 0
for m in ("resnet50", "resnet34", "vgg16", "alexnet"):
    for p in ("fp32", "tf32", "bf16"):
        for b in (64, 128, 256):
            k = (m, b, p)
            r = ref.get(k)
            n = now.get(k)
            if r is None:
                print(f"| {m} | {b} | {p} | {n[0]:.0f} ({n[2]}) | not in the 2026-11-22 matrix | - | - | - |" if n else
                      f"| {m} | {b} | {p} | - | not in the 2026-11-22 matrix | - | - | - |")
                continue
            rows += 1
            if n is None:
                missing.append(k)
                print(f"| {m} | {b} | {p} | not measured | {r['ours_images_per_s']:.0f} | - | - | - |")
                continue
            change = 100.0 * (n[0] / r["ours_images_per_s"] - 1.0)
            if change < -2.0:
                below.append((m, b, p, round(change, 1)))
            ratio = f"{n[0] / n[1]:.3f}" if n[1] else "-"
            print(f"| {m} | {b} | {p} | {n[0]:.0f} ({n[2]}) | {r['ours_images_per_s']:.0f} ({r['call']}, "
                  f"{r.get('conv_search_candidates')}) | {change:+.1f} % | {ratio} | {r['ratio']:.3f} |")
print()
print(f"{rows - len(below) - len(missing)} of {rows} cells of the 2026-11-22 matrix no more than 2 % below it; "
      f"below by more: {below or 'none'}; not measured: {missing or 'none'}")
