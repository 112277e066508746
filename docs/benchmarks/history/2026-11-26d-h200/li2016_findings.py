#!/usr/bin/env python3
"""Li et al. 2016's findings re-examined on an H200 (issue 19): from call 10's convbench runs (fp32 without
TF32, NCHW; the li2016 preset at the paper's batch 128, all three directions, and a kernel-size and
stride sweep around the paper's basic tuple (64, 128, 64, k, s), forward), per problem and direction:
the fastest implementation and the runner-up, the fastest per family (cuDNN unrolling/implicit GEMM,
cuDNN FFT, cuDNN Winograd, the graph API, our own), the extra memory of the fastest and of each family,
and the largest batch that fits. Then the transfer share. Prints markdown.
Usage: python3 li2016_findings.py (from this directory)."""
import gzip
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))


def family(name):
    if name.startswith("own:"):
        return "own " + name[4:].split("_")[0]
    if name.startswith("graph"):
        return "graph API"
    if "fft" in name:
        return "cuDNN FFT"
    if "winograd" in name:
        return "cuDNN Winograd"
    return "cuDNN GEMM/direct"


def table(path, title):
    doc = json.load(gzip.open(os.path.join(HERE, path)))
    print(f"### {title}\n")
    print("| problem (n,c,h,w,k,r=s,stride) | direction | fastest ms (ws MiB) | runner-up ms | best per family ms |")
    print("|---|---|---|---|---|")
    groups = {}
    for c in doc["cells"]:
        groups.setdefault((c["problem"], c["direction"]), []).append(c)
    for (p, d), cells in groups.items():
        ok = sorted((c for c in cells if c["status"] == "ok"), key=lambda c: c["time_ms_median"])
        if not ok:
            continue
        best = {}
        for c in ok:
            best.setdefault(family(c["implementation"]), c)
        fams = "; ".join(f"{f} {c['time_ms_median']:.3f}" for f, c in sorted(best.items(), key=lambda kv: kv[1]["time_ms_median"]))
        f = dict(kv.split("=") for kv in p.split(","))
        short = f"{f['n']},{f['c']},{f['h']},{f['w']},{f['k']},{f['r']},{f['stride']}"
        print(f"| {short} | {d} | {ok[0]['implementation']} {ok[0]['time_ms_median']:.3f} ({ok[0]['workspace_bytes'] / 2**20:.0f}) | "
              f"{ok[1]['implementation']} {ok[1]['time_ms_median']:.3f} | {fams} |" if len(ok) > 1 else
              f"| {short} | {d} | {ok[0]['implementation']} {ok[0]['time_ms_median']:.3f} | - | {fams} |")
    print()
    return doc


preset = table("call10_li2016_preset.json.gz", "Li et al. 2016 Table I at batch 128, fp32, three directions")
table("call10_li2016_sweep.json.gz", "Kernel size and stride around (64, 128, 64, k, s), forward")

print("### Extra memory (forward): the fastest implementation against implicit GEMM, and the largest batch that fits\n")
print("| problem | fastest: ws MiB, max batch | implicit GEMM: ws MiB, max batch | hungriest: name, ws MiB |")
print("|---|---|---|---|")
rows = {}
for c in preset["cells"]:
    if c["direction"] == "forward" and c["status"] == "ok":
        rows.setdefault(c["problem"], []).append(c)
for p, cells in rows.items():
    fastest = min(cells, key=lambda c: c["time_ms_median"])
    implicit = next(c for c in cells if c["implementation"] == "implicit_gemm")
    hungry = max(cells, key=lambda c: c["workspace_bytes"])
    mb = lambda c: c["workspace_bytes"] / 2**20
    print(f"| {p.split(',stride')[0]} | {fastest['implementation']}: {mb(fastest):.0f}, {fastest.get('max_batch')} | "
          f"{mb(implicit):.0f}, {implicit.get('max_batch')} | {hungry['implementation']}: {mb(hungry):.0f} |")
print()
print("### Transfers against the fastest forward convolution (host to device)\n")
print("| problem | what | MiB | pageable GB/s, share | pinned GB/s, share |")
print("|---|---|---|---|---|")
tr = {}
for t in preset["transfers"]:
    if t["direction"] == "h2d":
        tr.setdefault((t["problem"], t["what"]), {})[t["memory"]] = t
for (p, what), m in tr.items():
    pg, pn = m.get("pageable"), m.get("pinned")
    print(f"| {p.split(',stride')[0]} | {what} | {pg['bytes'] / 2**20:.1f} | {pg['gb_per_s']:.1f}, {100 * pg['share_of_total']:.0f} % | "
          f"{pn['gb_per_s']:.1f}, {100 * pn['share_of_total']:.0f} % |")
