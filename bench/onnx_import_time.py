#!/usr/bin/env python3
"""ONNX import time (target: a 100 MB model in < 2 s). Writes large zoo models with
`cnnergy export-onnx` (AlexNet about 233 MiB, VGG-16 about 528 MiB of weights) and times
`cnnergy model-info FILE.onnx` (parse with libonnx's protobuf classes, decode every initialiser,
map the graph, shape inference, the per-layer table) against `cnnergy model-info ZOO_NAME` (the same
table without the import), median of --repeats runs, wall clock of the whole process. Prints a
table and writes JSON. Python's standard library only.

usage: onnx_import_time.py BUILD_DIR [--models alexnet,vgg16] [--repeats 3] [--work DIR] [--json FILE]
"""
import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time


CPU_S = []  # CPU seconds (user + system) of the latest timed() child: steadier than wall on a busy host


def timed(cmd):
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    dt = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU_S.append(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {p.returncode}: {p.stderr.strip()[-500:]}")
    return dt


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("build_dir")
    ap.add_argument("--models", default="alexnet,vgg16")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--work", default="onnx_import_time")
    ap.add_argument("--json", default=None, help="default: WORK/onnx_import_time.json")
    ap.add_argument("--target-s-per-100mb", type=float, default=2.0)
    a = ap.parse_args()
    cnnergy = os.path.join(a.build_dir, "bin", "cnnergy")
    os.makedirs(a.work, exist_ok=True)
    rows = []
    print(f"{'model':10} {'MB':>8} {'import+table s':>15} {'CPU s':>6} {'zoo table s':>12} {'import s':>9} "
          f"{'s per 100 MB':>13} target")
    for name in a.models.split(","):
        path = os.path.join(a.work, name + ".onnx")
        export_s = timed([cnnergy, "export-onnx", name, path])
        mb = os.path.getsize(path) / 1e6
        timed([cnnergy, "model-info", path])  # one untimed run: the file in the page cache, like a second import
        onnx_runs = [timed([cnnergy, "model-info", path]) for _ in range(a.repeats)]
        onnx_cpu = statistics.median(CPU_S[-a.repeats:])
        zoo_runs = [timed([cnnergy, "model-info", name]) for _ in range(a.repeats)]
        onnx_s, zoo_s = statistics.median(onnx_runs), statistics.median(zoo_runs)
        import_s = max(onnx_s - zoo_s, 0.0)
        per_100 = onnx_s * 100.0 / mb  # the whole process, scaled: the conservative reading
        ok = per_100 < a.target_s_per_100mb
        rows.append({"model": name, "file_mb": mb, "export_s": export_s, "model_info_onnx_s": onnx_s,
                     "model_info_onnx_runs_s": onnx_runs, "model_info_zoo_s": zoo_s, "import_s_estimate": import_s,
                     "model_info_onnx_cpu_s": onnx_cpu, "load_average_1min": os.getloadavg()[0],
                     "whole_process_s_per_100mb": per_100, "meets_target": ok})
        print(f"{name:10} {mb:8.1f} {onnx_s:15.3f} {onnx_cpu:6.2f} {zoo_s:12.3f} {import_s:9.3f} {per_100:13.3f} "
              f"{'met' if ok else 'MISSED'} (< {a.target_s_per_100mb:g} s)")
        os.remove(path)
    doc = {"tool": "bench/onnx_import_time.py", "host": platform.node(), "cpus": os.cpu_count(),
           "repeats": a.repeats, "note": "file in the page cache (one untimed run first); wall clock and CPU time (user + system) of the process",
           "results": rows}
    out = a.json or os.path.join(a.work, "onnx_import_time.json")
    with open(out, "w") as f:
        json.dump(doc, f, indent=2)
    print(f"JSON: {out}")
    return 0 if all(r["meets_target"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
