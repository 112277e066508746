#!/usr/bin/env python3
"""GPU time by kernel category from Nsight Compute CSV exports of one training step.

Reads what `ncu --csv --page raw --metrics gpu__time_duration.sum` prints (or `ncu --import R.ncu-rep
--csv --page raw`): a column per metric, then a row of units. The default details page (a row per
metric: "Metric Name", "Metric Unit", "Metric Value") is read too. Lines before the CSV header
(==PROF== messages, the program's own output) are skipped. Prints per file the time per category
and the top kernels; with two files also the categories side by side (A, B, A - B). Times are sums
of kernel durations: ncu runs kernels one at a time, so overlap and idle gaps are not in them.
Usage: kernel_summary.py A.csv [B.csv ...] [--top 25] [--json OUT]. Stdlib only.
"""
import argparse
import csv
import io
import json
import os
import re
import sys

METRIC = "gpu__time_duration.sum"
# The same duration as a section shows it (details page with --section SpeedOfLight).
METRIC_LABELS = {METRIC, "Duration"}
UNIT_MS = {"nsecond": 1e-6, "ns": 1e-6, "usecond": 1e-3, "us": 1e-3, "msecond": 1.0, "ms": 1.0,
           "second": 1e3, "s": 1e3}

# First match wins; a category may take several rows. Matched against the demangled name,
# case-insensitively. Our kernels: src/backend/cuda/*.cu; PyTorch's: at::native; torch.compile's
# start with triton_. "gemm" holds kernels named as GEMMs but not as convolutions: cuBLAS (the fully
# connected layer) and any cuDNN engine that runs a 1x1 convolution as a plain GEMM (the kernel
# count tells which). Our per-channel reductions (tile_reduce, reduce_channel_*) count as batch norm:
# a ResNet has no convolution bias for them to serve.
CATEGORIES = [
    ("nccl", r"nccl"),
    ("triton fused", r"^triton_"),
    ("optimizer", r"sgd_kernel|multi_tensor_apply|fused_sgd|_foreach_"),
    ("copy/transpose", r"nchwToNhwc|nhwcToNchw|transpose|direct_copy|copy_kernel|CatArray"
                       r"|convert_(generic|same_layout)_kernel|copy_2d_kernel|(pad|crop)_2d_kernel"),
    ("batch norm", r"batch_?norm|cudnn::bn_|\bbn_\w*kernel|bn_(fw|bw)_"
                   r"|(tile|plane)_(reduce|apply|backward_apply)_kernel|reduce_channel_(inner|last)_kernel"),
    ("pooling", r"pool"),
    ("loss/softmax", r"softmax|xent|nll_loss|cross_entropy|count_topk|\bmean_kernel"),
    ("convolution", r"conv|fprop|dgrad|wgrad|implicit|winograd|fft"),
    ("gemm", r"gemm|nvjet|cublas|splitK"),
    ("convolution", r"xmma|cutlass|sm\d\d_|cudnn"),
    ("elementwise", r"elementwise|map_kernel|fill_kernel|bias_add|relu|dropout|check_finite|reduce_kernel"
                    r"|at::native"),
]
OTHER = "other"
# The order the tables list categories in (a category only in CATEGORIES goes after these).
DISPLAY = ["convolution", "gemm", "batch norm", "triton fused", "elementwise", "pooling", "loss/softmax",
           "copy/transpose", "optimizer", "nccl"]
_COMPILED = [(name, re.compile(rx, re.IGNORECASE)) for name, rx in CATEGORIES]


def category_names():
    names = list(DISPLAY)
    for name, _ in CATEGORIES:
        if name not in names:
            names.append(name)
    return names + [OTHER]


def categorize(kernel):
    for name, rx in _COMPILED:
        if rx.search(kernel):
            return name
    return OTHER


def short_name(kernel):
    """The name without 'void ' and the parameter list (template arguments stay)."""
    k = kernel.strip()
    if k.startswith("void "):
        k = k[5:]
    if k.endswith(")"):
        depth = 0
        for i in range(len(k) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(k[i], 0)
            if depth == 0:
                if i > 0:
                    k = k[:i]
                break
    return k.strip()


def _number(text):
    text = (text or "").strip().replace(",", "")
    try:
        return float(text)
    except ValueError:
        return None


def _scale(unit, where):
    unit = (unit or "").strip().lower()
    if unit not in UNIT_MS:
        raise ValueError(f"{where}: unknown time unit {unit!r} (expected one of {sorted(UNIT_MS)})")
    return UNIT_MS[unit]


def read_launches(path):
    """[(kernel name, ms)] for every kernel launch in an ncu CSV export (raw or details page)."""
    with open(path, newline="", encoding="utf-8", errors="replace") as fh:
        lines = fh.read().splitlines()
    start = None
    for i, line in enumerate(lines):
        if "Kernel Name" in line:
            try:
                if "Kernel Name" in next(csv.reader([line])):
                    start = i
                    break
            except csv.Error:
                pass
    if start is None:
        raise ValueError(f"{path}: no CSV header with a 'Kernel Name' column (not an ncu --csv export?)")
    reader = csv.DictReader(io.StringIO("\n".join(lines[start:])))
    fields = reader.fieldnames or []
    launches, seen = [], set()
    if "Metric Name" in fields and "Metric Value" in fields:  # details page: a row per metric
        for row in reader:
            if (row.get("Metric Name") or "").strip() not in METRIC_LABELS:
                continue
            key = (row.get("Process ID"), row.get("ID"))
            value = _number(row.get("Metric Value"))
            if key in seen or value is None or not row.get("Kernel Name"):
                continue
            seen.add(key)
            launches.append((row["Kernel Name"], value * _scale(row.get("Metric Unit"), path)))
        return launches
    column = next((f for f in fields if f == METRIC or f.endswith("." + METRIC) or f.endswith(" " + METRIC)), None)
    if column is None:
        raise ValueError(f"{path}: no {METRIC} column (collect it with --metrics {METRIC})")
    scale = None
    for row in reader:
        if not (row.get("Kernel Name") or "").strip():  # the units row (raw page)
            if scale is None and (row.get(column) or "").strip():
                scale = _scale(row[column], path)
            continue
        value = _number(row.get(column))
        key = (row.get("Process ID"), row.get("ID"))
        if value is None or key in seen:
            continue
        seen.add(key)
        if scale is None:
            raise ValueError(f"{path}: kernel rows before the units row; expected ncu's raw page")
        launches.append((row["Kernel Name"], value * scale))
    return launches


def summarize(path, top):
    launches = read_launches(path)
    total = sum(ms for _, ms in launches)
    cats = {name: {"category": name, "kernels": 0, "total_ms": 0.0} for name in category_names()}
    kernels = {}
    for name, ms in launches:
        c = cats[categorize(name)]
        c["kernels"] += 1
        c["total_ms"] += ms
        k = kernels.setdefault(short_name(name), {"name": short_name(name), "category": categorize(name),
                                                   "count": 0, "total_ms": 0.0})
        k["count"] += 1
        k["total_ms"] += ms
    for c in cats.values():
        c["percent"] = 100.0 * c["total_ms"] / total if total > 0 else 0.0
    label = os.path.splitext(os.path.basename(path))[0]
    return {"file": path, "label": label, "kernels": len(launches), "total_ms": total,
            "categories": list(cats.values()),
            "top": sorted(kernels.values(), key=lambda k: -k["total_ms"])[:top]}


def print_summary(s, out):
    out.write(f"== {s['label']} ({s['file']}): {s['kernels']} kernels, {s['total_ms']:.3f} ms of kernel time\n")
    out.write(f"{'category':16} {'kernels':>7} {'total ms':>10} {'% step':>7}\n")
    for c in s["categories"]:
        if c["kernels"]:
            out.write(f"{c['category']:16} {c['kernels']:7d} {c['total_ms']:10.3f} {c['percent']:7.1f}\n")
    out.write(f"{'total':16} {s['kernels']:7d} {s['total_ms']:10.3f} {100.0 if s['kernels'] else 0.0:7.1f}\n")
    out.write(f"top {len(s['top'])} kernels by total time\n{'total ms':>10} {'count':>5}  kernel\n")
    for k in s["top"]:
        name = k["name"] if len(k["name"]) <= 90 else k["name"][:87] + "..."
        out.write(f"{k['total_ms']:10.3f} {k['count']:5d}  {name}\n")
    out.write("\n")


def compare(a, b):
    rows = []
    for ca, cb in zip(a["categories"], b["categories"]):
        if ca["kernels"] or cb["kernels"]:
            rows.append({"category": ca["category"], "a_ms": ca["total_ms"], "b_ms": cb["total_ms"],
                         "diff_ms": ca["total_ms"] - cb["total_ms"], "a_kernels": ca["kernels"],
                         "b_kernels": cb["kernels"]})
    rows.append({"category": "total", "a_ms": a["total_ms"], "b_ms": b["total_ms"],
                 "diff_ms": a["total_ms"] - b["total_ms"], "a_kernels": a["kernels"], "b_kernels": b["kernels"]})
    return {"a": a["label"], "b": b["label"], "rows": rows}


def print_comparison(cmp, out):
    out.write(f"== A = {cmp['a']}, B = {cmp['b']} (ms of kernel time; kernel counts in brackets)\n")
    out.write(f"{'category':16} {'A ms':>10} {'(n)':>6} {'B ms':>10} {'(n)':>6} {'A - B':>10}\n")
    for r in cmp["rows"]:
        out.write(f"{r['category']:16} {r['a_ms']:10.3f} {'(' + str(r['a_kernels']) + ')':>6} "
                  f"{r['b_ms']:10.3f} {'(' + str(r['b_kernels']) + ')':>6} {r['diff_ms']:+10.3f}\n")
    out.write("\n")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", nargs="+", help="ncu --csv exports (raw or details page)")
    ap.add_argument("--top", type=int, default=25, help="kernels listed per file (default 25)")
    ap.add_argument("--json", metavar="OUT", help="also write the tables as JSON")
    a = ap.parse_args(argv)
    summaries, failed = [], False
    for path in a.csv:
        try:
            s = summarize(path, a.top)
        except (OSError, ValueError) as exc:
            sys.stderr.write(f"kernel_summary: {exc}\n")
            failed = True
            continue
        if not s["kernels"]:
            sys.stderr.write(f"kernel_summary: {path}: no kernel with {METRIC} (empty profiler range?)\n")
            failed = True
        summaries.append(s)
        print_summary(s, sys.stdout)
    result = {"metric": METRIC, "files": summaries}
    if len(summaries) == 2:
        result["comparison"] = compare(summaries[0], summaries[1])
        print_comparison(result["comparison"], sys.stdout)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(result, fh, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
