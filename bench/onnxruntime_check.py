#!/usr/bin/env python3
"""The zoo's semantics against ONNX Runtime: each zoo model is written by `cnnergy export-onnx`
(seeded random weights), run by ONNX Runtime's CPU provider on random inputs, and by
`cnnergy infer MODEL.onnx --device cpu --inputs X.npy --outputs Y.npy` (our importer and CPU
backend) on the same inputs; with --zoo also by `cnnergy infer MODEL --seed S` (the zoo model
itself, the same seeded weights, no ONNX on our side). Prints a table (max abs difference over max
abs logit, top-1 agreement, seconds per step) and writes JSON.

Where onnxruntime is not installed (as on the development machine) every cnnergy step still runs,
the ONNX Runtime columns say "absent", and the script ends with a skip note and exit 0.
On the lent machine: /opt/torch/.venv/bin/python bench/onnxruntime_check.py build/release

usage: onnxruntime_check.py BUILD_DIR [--models a,b] [--batch N] [--seed S] [--tolerance T]
                            [--zoo] [--work DIR] [--json FILE]
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import time


def run(cmd):
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}: {(p.stdout + p.stderr).strip()[-800:]}")
    return dt


def zoo_models(cnnergy):
    p = subprocess.run([cnnergy, "model-info", "--list", "--format", "json"], capture_output=True, text=True, check=True)
    return [(r["model"], r["input"]) for r in json.loads(p.stdout)]


def compare(np, want, got):
    diff = float(np.max(np.abs(want - got)))
    scale = float(np.max(np.abs(want)))
    return {"max_abs_diff": diff, "max_abs_logit": scale, "relative": diff / scale if scale > 0 else float("inf"),
            "top1_agreement": float(np.mean(np.argmax(want, 1) == np.argmax(got, 1)))}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("build_dir", help="the cnnergy build directory (with bin/cnnergy)")
    ap.add_argument("--models", help="comma-separated zoo models (default: every one)")
    ap.add_argument("--batch", type=int, default=2, help="random inputs per model (default 2)")
    ap.add_argument("--seed", type=int, default=3, help="seed of the exported weights and the inputs")
    ap.add_argument("--tolerance", type=float, default=1e-4,
                    help="pass when max |a - b| <= T x max |logit| (default 1e-4, the import's bar)")
    ap.add_argument("--zoo", action="store_true", help="also run the zoo model itself (cnnergy infer MODEL --seed S)")
    ap.add_argument("--work", default="onnxruntime_check", help="directory of the .onnx and .npy files")
    ap.add_argument("--json", default=None, help="JSON output (default: WORK/onnxruntime_check.json)")
    ap.add_argument("--keep", action="store_true", help="keep the .onnx files (VGG: > 500 MB each)")
    a = ap.parse_args()

    cnnergy = os.path.join(a.build_dir, "bin", "cnnergy")
    if not os.access(cnnergy, os.X_OK):
        print(f"onnxruntime_check: no cnnergy binary at {cnnergy}", file=sys.stderr)
        return 2
    try:
        import numpy as np
    except ImportError:
        print("SKIP: numpy is not installed; nothing checked")
        return 0
    try:
        import onnxruntime as ort
        ort_version = ort.__version__
    except ImportError:
        ort, ort_version = None, None
    os.makedirs(a.work, exist_ok=True)
    zoo = zoo_models(cnnergy)
    wanted = a.models.split(",") if a.models else [m for m, _ in zoo]
    inputs = dict(zoo)
    unknown = [m for m in wanted if m not in inputs]
    if unknown:
        print(f"onnxruntime_check: not zoo models: {', '.join(unknown)}", file=sys.stderr)
        return 2

    rows, failures = [], 0
    out = a.json or os.path.join(a.work, "onnxruntime_check.json")

    def write_json():  # after every model: a run cut short by a timeout keeps what it checked
        doc = {"tool": "bench/onnxruntime_check.py", "onnxruntime": ort_version, "numpy": np.__version__,
               "host": platform.node(), "machine": platform.machine(), "batch": a.batch, "seed": a.seed,
               "tolerance": a.tolerance, "results": rows}
        with open(out, "w") as f:
            json.dump(doc, f, indent=2)

    rng = np.random.default_rng(a.seed)
    for name in wanted:
        row = {"model": name, "batch": a.batch}
        onnx_path = os.path.join(a.work, name + ".onnx")
        x_path, y_path, z_path = (os.path.join(a.work, f"{name}_{k}.npy") for k in ("x", "cnnergy", "zoo"))
        try:
            row["export_s"] = run([cnnergy, "export-onnx", name, onnx_path, "--seed", str(a.seed)])
            row["onnx_mib"] = os.path.getsize(onnx_path) / 2**20
            x = rng.standard_normal((a.batch, *inputs[name])).astype(np.float32)
            np.save(x_path, x)
            row["cnnergy_s"] = run([cnnergy, "infer", onnx_path, "--device", "cpu", "--batch", str(a.batch),
                                    "--inputs", x_path, "--outputs", y_path])
            ours = np.load(y_path)
            if a.zoo:
                row["zoo_s"] = run([cnnergy, "infer", name, "--device", "cpu", "--seed", str(a.seed), "--batch",
                                    str(a.batch), "--inputs", x_path, "--outputs", z_path])
                row["zoo_vs_onnx_file"] = compare(np, np.load(z_path), ours)
            if ort is not None:
                t0 = time.perf_counter()
                sess = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
                theirs = sess.run(["logits"], {"input": x})[0]
                row["onnxruntime_s"] = time.perf_counter() - t0
                row["onnxruntime"] = compare(np, theirs, ours)
                if a.zoo:
                    row["onnxruntime_vs_zoo"] = compare(np, theirs, np.load(z_path))
            checks = [row[k]["relative"] for k in ("onnxruntime", "onnxruntime_vs_zoo", "zoo_vs_onnx_file") if k in row]
            row["status"] = "ok" if all(c <= a.tolerance for c in checks) else "MISMATCH"
            if ort is None and not checks:
                row["status"] = "ran (no onnxruntime)"
        except Exception as e:  # one model's failure is reported; the others still run
            row["status"] = "ERROR"
            row["error"] = str(e)
        if row["status"] in ("MISMATCH", "ERROR"):
            failures += 1
        if not a.keep and os.path.exists(onnx_path):
            os.remove(onnx_path)
        rows.append(row)
        print_row(row, a.zoo)
        write_json()

    write_json()
    print(f"\n{len(rows) - failures}/{len(rows)} models ok (tolerance {a.tolerance:g} x max |logit|); JSON: {out}")
    if ort is None:
        print("SKIP: onnxruntime is not installed here: only cnnergy's side ran (export, import, CPU inference). "
              "Run on the lent machine with /opt/torch/.venv/bin/python.")
        return 0 if failures == 0 else 1
    return 0 if failures == 0 else 1


HEADER_PRINTED = []


def print_row(row, zoo):
    if not HEADER_PRINTED:
        cols = f"{'model':14} {'status':20} {'ort rel diff':>12} {'top-1':>6} {'MiB':>7} {'export s':>8} {'ours s':>7} {'ort s':>7}"
        if zoo:
            cols += f" {'zoo rel diff':>12} {'ort vs zoo':>12}"
        print(cols)
        HEADER_PRINTED.append(True)

    def rel(k):
        return f"{row[k]['relative']:.2e}" if k in row else "absent"
    line = (f"{row['model']:14} {row['status']:20} {rel('onnxruntime'):>12} "
            f"{(str(round(row['onnxruntime']['top1_agreement'] * 100)) + '%') if 'onnxruntime' in row else '-':>6} "
            f"{row.get('onnx_mib', 0):7.1f} {row.get('export_s', 0):8.2f} {row.get('cnnergy_s', 0):7.2f} "
            f"{row.get('onnxruntime_s', 0):7.2f}")
    if zoo:
        line += f" {rel('zoo_vs_onnx_file'):>12} {rel('onnxruntime_vs_zoo'):>12}"
    print(line, flush=True)
    if "error" in row:
        print(f"  {row['error']}")


if __name__ == "__main__":
    sys.exit(main())
