#!/usr/bin/env python3
"""Where CPU inference spends its time, by operator category, ours against ONNX Runtime's CPU EP.

Ours: `cnnergy infer MODEL --device cpu --mark-requests` under DNNL_VERBOSE=1 (oneDNN's per-primitive
execution times), counting only the timed requests; ONNX Runtime: its own profile (enable_profiling),
Python's onnxruntime, else onnxruntime-node (bench/ort_cpu_profile.js), or a profile JSON made elsewhere
(--ort-profile). Also a clean run of each (no profiling) for the wall time. Stdlib only (plus onnxruntime).
"""
import argparse
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import onnx_graph_summary as ogs  # noqa: E402  (a minimal ONNX protobuf reader, beside this file)

HERE = os.path.dirname(os.path.abspath(__file__))


# ---- categories -------------------------------------------------------------------------------------

def _int(pattern, text, default=None):
    m = re.search(pattern, text)
    return int(m.group(1)) if m else default


def ours_category(kind, attrs, prob):
    """A oneDNN verbose line's category (the same names as ort_category's)."""
    if kind == "convolution":
        kh, kw = _int(r"kh(\d+)", prob, 0), _int(r"kw(\d+)", prob, 0)
        return "conv %dx%d%s" % (kh, kw, " +add" if "sum" in attrs else "")
    if kind == "reorder":
        return "reorder (layout)"
    if kind.startswith("pooling"):
        if "pooling_max" in attrs + prob:
            return "max pool"
        return "global avg pool" if _int(r"oh(\d+)", prob) == 1 and _int(r"ow(\d+)", prob) == 1 else "avg pool"
    if kind in ("inner_product", "matmul"):
        return "classifier (fc)"
    if kind in ("eltwise", "binary", "sum"):
        return "elementwise"
    return kind


ORT_ELEMENTWISE = {"Add", "Relu", "Sum", "Mul", "Sub", "Div", "Clip", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh"}
ORT_COPY = {"Flatten", "Reshape", "Identity", "Squeeze", "Unsqueeze", "Transpose", "Concat", "Split", "Shape"}


def ort_category(op, inputs):
    if op in ("Conv", "FusedConv"):
        w = inputs[1] if len(inputs) > 1 else []
        kh, kw = (w[-2], w[-1]) if len(w) >= 4 else (0, 0)
        return "conv %dx%d%s" % (kh, kw, " +add" if len(inputs) >= 4 else "")
    if op in ("ReorderInput", "ReorderOutput"):
        return "reorder (layout)"
    if op == "MaxPool":
        return "max pool"
    if op == "GlobalAveragePool":
        return "global avg pool"
    if op == "AveragePool":
        return "avg pool"
    if op in ("Gemm", "FusedGemm", "MatMul", "FusedMatMul"):
        return "classifier (fc)"
    if op in ORT_ELEMENTWISE:
        return "elementwise"
    if op in ORT_COPY:
        return "reshape / copy"
    return op


# ---- ours -------------------------------------------------------------------------------------------

def parse_ours(stdout):
    """The oneDNN verbose lines of the timed requests (between the cnnergy_request markers)."""
    info, req_ms, per_req = {}, [], []
    inside, current = False, []
    for line in stdout.splitlines():
        if line.startswith("cnnergy_request,"):
            tag = line.split(",")[1]
            if tag == "begin":
                inside, current = True, []
            elif tag == "end":
                inside = False
            else:
                req_ms.append(float(line.split(",")[2]))
                per_req.append(current)
                current = []
            continue
        if not (line.startswith("onednn_verbose,") or line.startswith("dnnl_verbose,")):
            continue
        f = line.split(",")
        nthr = [x for x in f if x.startswith("nthr:")]
        if f[1] == "info" and nthr:
            info["threads"] = int(nthr[0][5:])
        if f[1] == "info" and f[2].startswith("oneDNN v"):
            info["onednn"] = f[2].split()[1]
        if f[1] == "info" and len(f) > 3 and f[2] == "cpu" and f[3].startswith("isa:"):
            info["isa"] = f[3][4:]
        if inside and f[1] == "exec" and len(f) >= 11:
            kind, impl, attrs, prob = f[3], f[4], f[7] + "," + f[8], f[9]
            current.append((kind, impl, attrs, prob, float(f[10])))
    if not per_req:
        raise SystemExit("no cnnergy_request markers in cnnergy's output (a binary without --mark-requests?)")
    return info, req_ms, per_req


def conv_shape(c, h, w, k, oh, ow, r, s_):
    """The same convolution on both sides: the batch left out (a request's convolutions of this shape
    summed), channels rounded up to 16 (ORT's NCHWc tensors carry their channels padded to its block)."""
    up = lambda v: (v + 15) // 16 * 16  # noqa: E731
    return "%dx%dx%d -> %dx%dx%d %dx%d" % (up(c), h, w, up(k), oh, ow, r, s_)


def ours_conv_shape(prob):
    g = lambda k: _int(k + r"(\d+)", prob, 0)  # noqa: E731
    return conv_shape(g("ic"), g("ih"), g("iw"), g("oc"), g("oh"), g("ow"), g("kh"), g("kw"))


def aggregate_ours(per_req):
    n = len(per_req)
    cats, counts, impls, items, shapes = {}, {}, {}, {}, {}
    for req in per_req:
        for kind, impl, attrs, prob, ms in req:
            if kind == "convolution":
                k = ours_conv_shape(prob)
                shapes[k] = shapes.get(k, 0.0) + ms / n
            c = ours_category(kind, attrs, prob)
            cats[c] = cats.get(c, 0.0) + ms / n
            counts[c] = counts.get(c, 0.0) + 1.0 / n
            k = "%s %s%s" % (kind, impl, (" " + c) if kind == "convolution" else "")
            impls[k] = impls.get(k, 0.0) + ms / n
            key = "%s %s %s %s" % (kind, impl, prob, attrs.strip(", "))
            items[key] = items.get(key, 0.0) + ms / n
    return cats, counts, impls, items, shapes


def split_variant(spec):
    """'LABEL=TOKENS': (label, extra infer flags, environment settings); NAME=VALUE tokens are the latter."""
    label, _, rest = spec.partition("=")
    flags, env = [], {}
    for t in shlex.split(rest):
        m = re.match(r"^([A-Z_][A-Z0-9_]*)=(.*)$", t)
        if m:
            env[m.group(1)] = m.group(2)
        else:
            flags.append(t)
    return label, flags, env


def run_ours(a, model, batch, requests, profiled, workdir, variant=None):
    tag = "prof" if profiled else "clean"
    if variant:  # each variant its own files: the default's are kept
        tag += "_" + re.sub(r"[^A-Za-z0-9_.-]", "_", variant.partition("=")[0])
    jpath = os.path.join(workdir, "ours_b%d_%s.json" % (batch, tag))
    cmd = [a.cnnergy, "infer", model, "--device", "cpu", "--batch", str(batch), "--requests", str(requests),
           "--warmup", str(a.warmup), "--windows", "1", "--window-s", "0.2", "--idle-s", "0", "--json", jpath]
    cmd += shlex.split(a.ours_args)
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    if variant:
        _, flags, venv = split_variant(variant)
        cmd += flags
        env.update(venv)
    env.pop("ONEDNN_VERBOSE", None)
    if profiled:
        cmd.append("--mark-requests")
        env["DNNL_VERBOSE"] = "1"  # oneDNN 2.x and 3.x: the execution of each primitive with its time
    else:
        env.pop("DNNL_VERBOSE", None)
    # stdout (oneDNN's verbose lines, ~0.5 MB a ResNet-50 request at batch 32) to a file, not a pipe: a
    # reader process would take CPU time from oneDNN's threads while they run.
    log = os.path.join(workdir, "ours_b%d_%s.out" % (batch, tag))
    with open(log, "w") as fh:
        p = subprocess.run(cmd, env=env, stdout=fh, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        raise SystemExit("cnnergy failed (%d): %s\n%s" % (p.returncode, " ".join(cmd), p.stderr[-2000:]))
    with open(log) as fh:
        stdout = fh.read()
    os.remove(log)
    row = json.load(open(jpath))["results"][0]
    m = re.search(r"cpu path: (.*)", p.stderr)
    out = {"cpu_path": m.group(1) if m else row.get("cpu_path"), "p50_ms": row["end_to_end"]["p50_ms"],
           "mean_ms": row["end_to_end"]["mean_ms"], "openmp_wait": row.get("openmp_wait"),
           "cpu_plan_chunk": row.get("cpu_plan_chunk"), "cpu_plan_chunk_choice": row.get("cpu_plan_chunk_choice")}
    if not profiled:
        return out
    info, req_ms, per_req = parse_ours(stdout)
    cats, counts, impls, items, shapes = aggregate_ours(per_req)
    out.update(info)
    out["conv_shapes"] = shapes
    if not any(per_req):
        print("ours: no oneDNN primitive ran in the timed requests (cpu path: %s)" % out["cpu_path"], file=sys.stderr)
    out.update(requests_profiled=len(per_req), wall_ms_profiled=statistics.mean(req_ms),
               primitives_per_request=statistics.mean(len(r) for r in per_req),
               operator_ms=sum(cats.values()), categories=cats, counts=counts, impls=impls,
               top=sorted(items.items(), key=lambda kv: -kv[1])[:a.top])
    return out


# ---- ONNX Runtime -----------------------------------------------------------------------------------

def parse_ort_profile(events, skip_runs):
    """Per timed model_run: node kernel times by category; run wall time from ORT's own model_run event."""
    runs = sorted((e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"),
                  key=lambda e: e["ts"])
    nodes = [e for e in events if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time")]
    timed = runs[skip_runs:]
    if not timed:
        raise SystemExit("the ONNX Runtime profile has %d model_run events, %d skipped" % (len(runs), skip_runs))
    n = len(timed)
    cats, counts, items, conv, in_run = {}, {}, {}, {}, [0.0] * n
    threads = None
    for e in nodes:
        idx = next((i for i, r in enumerate(timed) if r["ts"] <= e["ts"] <= r["ts"] + r["dur"]), None)
        if idx is None:
            continue
        args = e.get("args", {})
        op = args.get("op_name", "?")
        shapes = [list(s.values())[0] for s in args.get("input_type_shape", []) if s]
        c = ort_category(op, shapes)
        ms = e["dur"] / 1000.0
        in_run[idx] += ms
        cats[c] = cats.get(c, 0.0) + ms / n
        counts[c] = counts.get(c, 0.0) + 1.0 / n
        key = "%s %s" % (op, " ".join("x".join(map(str, s)) for s in shapes))
        items[key] = items.get(key, 0.0) + ms / n
        outs = [list(s.values())[0] for s in args.get("output_type_shape", []) if s]
        if op in ("Conv", "FusedConv") and len(shapes) >= 2 and len(shapes[0]) == 4 and outs and len(outs[0]) == 4:
            x, w, y = shapes[0], shapes[1], outs[0]
            k = conv_shape(x[1], x[2], x[3], y[1], y[2], y[3], w[-2], w[-1])
            conv[k] = conv.get(k, 0.0) + ms / n
        ts = args.get("thread_scheduling_stats", {})
        if "sub_threads" in ts and threads is None and ts["sub_threads"]:
            threads = len(ts["sub_threads"]) + 1
    run_ms = [r["dur"] / 1000.0 for r in timed]
    return {"requests_profiled": n, "wall_ms_profiled": statistics.mean(run_ms), "operator_ms": sum(cats.values()),
            "ort_overhead_ms": statistics.mean(r - k for r, k in zip(run_ms, in_run)), "categories": cats,
            "counts": counts, "conv_shapes": conv, "threads_seen": threads,
            "top": sorted(items.items(), key=lambda kv: -kv[1])}


def ort_runner(a):
    if a.ort in ("auto", "python"):
        try:
            import onnxruntime  # noqa: F401
            return "python"
        except ImportError:
            if a.ort == "python":
                raise SystemExit("--ort python: this python3 has no onnxruntime")
    if a.ort in ("auto", "node") and shutil.which("node"):
        p = subprocess.run(["node", "-e", "require('onnxruntime-node')"], capture_output=True)
        if p.returncode == 0:
            return "node"
        if a.ort == "node":
            raise SystemExit("--ort node: require('onnxruntime-node') fails (set NODE_PATH)")
    return None


def run_ort(a, runner, model, batch, chw, requests, profiled, workdir, save_optimized=False):
    prefix = os.path.join(workdir, "ort_b%d" % batch) if profiled else None
    optimized = os.path.join(workdir, "ort_optimized.onnx") if save_optimized else None
    if runner == "node":
        cmd = ["node", os.path.join(HERE, "ort_cpu_profile.js"), model, str(batch), "x".join(map(str, chw)),
               str(requests), str(a.warmup + 2), str(a.threads), prefix or "-", optimized or "-"]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            raise SystemExit("onnxruntime-node failed: %s" % p.stderr[-2000:])
        r = json.loads(p.stdout.strip().splitlines()[-1])
    else:
        import numpy as np
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.intra_op_num_threads = a.threads
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        if profiled:
            so.enable_profiling = True
            so.profile_file_prefix = prefix
        if optimized:
            so.optimized_model_filepath = optimized
        sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
        x = np.random.default_rng(1).standard_normal((batch,) + tuple(chw), dtype=np.float32)
        feeds = {sess.get_inputs()[0].name: x}
        for _ in range(a.warmup + 2):
            sess.run(None, feeds)
        ms = []
        for _ in range(requests):
            t0 = time.perf_counter()
            sess.run(None, feeds)
            ms.append((time.perf_counter() - t0) * 1000.0)
        r = {"framework": "onnxruntime %s (python)" % ort.__version__, "threads": a.threads, "ms": ms,
             "profile": sess.end_profiling() if profiled else None}
    ms = sorted(r["ms"])
    out = {"framework": r["framework"], "p50_ms": ms[(len(ms) - 1) // 2], "mean_ms": statistics.mean(ms)}
    if profiled:
        if not r.get("profile"):
            raise SystemExit("ONNX Runtime wrote no profile")
        out.update(parse_ort_profile(json.load(open(r["profile"])), a.warmup + 2))
        out["profile_file"] = r["profile"]
        out["top"] = out["top"][:a.top]
    return out


# ---- the model --------------------------------------------------------------------------------------

def prepare_model(a, workdir):
    """An .onnx path as it is; 'torchvision:NAME' exported by this python's torch; else a zoo name
    exported by `cnnergy export-onnx NAME`."""
    if a.model.endswith(".onnx"):
        return a.model
    path = os.path.join(workdir, a.model.replace(":", "_") + ".onnx")
    if a.model.startswith("torchvision:"):
        import torch
        import torchvision
        net = getattr(torchvision.models, a.model.split(":", 1)[1])().eval()
        torch.onnx.export(net, torch.randn(1, 3, 224, 224), path, input_names=["input"], output_names=["logits"],
                          dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}}, opset_version=13)
        return path
    p = subprocess.run([a.cnnergy, "export-onnx", a.model, path], capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit("cnnergy export-onnx %s failed: %s" % (a.model, p.stderr[-1000:]))
    return path


# ---- report -----------------------------------------------------------------------------------------

def median_dict(dicts):
    keys = sorted({k for d in dicts for k in d})
    return {k: statistics.median(d.get(k, 0.0) for d in dicts) for k in keys}


def summarize(rounds_ours, rounds_ort):
    s = {"ours": {}, "ort": {}}
    for side, rounds in (("ours", rounds_ours), ("ort", rounds_ort)):
        if not rounds:
            continue
        prof = [r["profiled"] for r in rounds]
        clean = [r["clean"] for r in rounds]
        s[side] = {"categories": median_dict([p["categories"] for p in prof]),
                   "counts": median_dict([p["counts"] for p in prof]),
                   "conv_shapes": median_dict([p.get("conv_shapes", {}) for p in prof]),
                   "operator_ms": statistics.median(p["operator_ms"] for p in prof),
                   "wall_ms_profiled": statistics.median(p["wall_ms_profiled"] for p in prof),
                   "clean_p50_ms": statistics.median(c["p50_ms"] for c in clean),
                   "clean_mean_ms": statistics.median(c["mean_ms"] for c in clean)}
    return s


def print_table(model, batch, s, nrounds):
    ours, ort = s["ours"], s["ort"]
    print("\n%s, batch %d: ms per request, median of %d round(s)" % (model, batch, nrounds))
    print("%-24s %10s %10s %10s" % ("category", "ours", "ORT", "ours-ORT"))
    cats = sorted(set(ours.get("categories", {})) | set(ort.get("categories", {})),
                  key=lambda c: -max(ours.get("categories", {}).get(c, 0), ort.get("categories", {}).get(c, 0)))

    def row(name, a, b):
        fa = "%10.3f" % a if a is not None else "%10s" % "-"
        fb = "%10.3f" % b if b is not None else "%10s" % "-"
        fd = "%+10.3f" % (a - b) if a is not None and b is not None else "%10s" % ""
        print("%-24s %s %s %s" % (name, fa, fb, fd))
    for c in cats:
        oc, rc = ours.get("categories", {}).get(c), ort.get("categories", {}).get(c)
        label = "%s (x%g/x%g)" % (c, round(ours.get("counts", {}).get(c, 0), 1),
                                  round(ort.get("counts", {}).get(c, 0), 1))
        row(label[:24] if len(label) <= 24 else c, oc if ours else None, rc if ort else None)
    g = lambda d, k: d.get(k) if d else None  # noqa: E731
    row("= operators", g(ours, "operator_ms"), g(ort, "operator_ms"))
    row("wall, profiled run", g(ours, "wall_ms_profiled"), g(ort, "wall_ms_profiled"))
    if ours and ort:
        row("outside operators", ours["wall_ms_profiled"] - ours["operator_ms"],
            ort["wall_ms_profiled"] - ort["operator_ms"])
    row("wall, clean run, mean", g(ours, "clean_mean_ms"), g(ort, "clean_mean_ms"))
    row("wall, clean run, p50", g(ours, "clean_p50_ms"), g(ort, "clean_p50_ms"))
    infl = lambda d: d["wall_ms_profiled"] / d["clean_mean_ms"] if d else None  # noqa: E731
    row("profiled / clean wall", infl(ours), infl(ort))
    if ours and ort and ours["conv_shapes"] and ort["conv_shapes"]:
        oc, rc = ours["conv_shapes"], ort["conv_shapes"]
        print("  the same convolutions (C x H x W -> K x OH x OW, R x S, channels rounded up to 16; "
              "ms per request, median of rounds):")
        for k in sorted(set(oc) | set(rc), key=lambda k: -max(oc.get(k, 0), rc.get(k, 0)))[:12]:
            print("    %-32s %9.3f %9.3f  ours/ORT %s" % (k, oc.get(k, 0), rc.get(k, 0),
                                                    "%.2f" % (oc[k] / rc[k]) if oc.get(k) and rc.get(k) else "-"))
    if ours and ort:
        print("ours / ORT (clean p50): %.2f; img/s by clean mean: ours %.1f, ORT %.1f"
              % (ours["clean_p50_ms"] / ort["clean_p50_ms"], batch * 1000 / ours["clean_mean_ms"],
                 batch * 1000 / ort["clean_mean_ms"]))


def check(res):
    """--check: the parse found primitives and the categories add up within the request time."""
    bad = []
    for b in res["batches"]:
        for r in b["ours"]:
            p = r["profiled"]
            if p["primitives_per_request"] <= 0 or p["operator_ms"] <= 0:
                bad.append("batch %d: no oneDNN primitive in the timed requests" % b["batch"])
            if abs(sum(p["categories"].values()) - p["operator_ms"]) > 1e-6 * max(1.0, p["operator_ms"]):
                bad.append("batch %d: categories do not add up" % b["batch"])
            if p["operator_ms"] > p["wall_ms_profiled"] * 1.02 + 0.01:
                bad.append("batch %d: operators %.3f ms > request %.3f ms" % (b["batch"], p["operator_ms"],
                                                                            p["wall_ms_profiled"]))
        for r in b["ort"]:
            p = r["profiled"]
            if p["operator_ms"] <= 0 or p["operator_ms"] > p["wall_ms_profiled"] * 1.02 + 0.01:
                bad.append("batch %d: ORT operators %.3f ms against its run %.3f ms"
                           % (b["batch"], p["operator_ms"], p["wall_ms_profiled"]))
    for m in bad:
        print("check failed: " + m, file=sys.stderr)
    return not bad


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="an .onnx file, a zoo name (exported by cnnergy export-onnx) or torchvision:NAME")
    ap.add_argument("--batch", default="1,32", help="batch sizes, comma-separated")
    ap.add_argument("--requests", default="30,5", help="timed requests per batch size (one value, or one per batch)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed requests before the timed ones (ours adds 2: "
                    "the first and the recording; ORT gets the same count)")
    ap.add_argument("--rounds", type=int, default=2, help="rounds, ours and ORT alternating within each")
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)),
                    help="OMP_NUM_THREADS for ours, intra_op_num_threads for ORT (default: the CPUs available)")
    ap.add_argument("--cnnergy", default=shutil.which("cnnergy") or os.path.join(HERE, "..", "build", "release", "bin",
                                                                                "cnnergy"))
    ap.add_argument("--ours-args", default="", help="more flags for cnnergy infer (e.g. '--cpu-plan-chunk 4')")
    ap.add_argument("--variant", action="append", default=[],
                    help="LABEL[@B+B...]='FLAGS VAR=VALUE': one more clean run of ours (in the first round; only at "
                         "the batch sizes after @, if given) with these infer flags and environment (e.g. "
                         "chunk32@32='--cpu-plan-chunk 32', active=OMP_WAIT_POLICY=ACTIVE); repeatable")
    ap.add_argument("--ort", choices=["auto", "python", "node", "none"], default="auto",
                    help="ONNX Runtime's runner (auto: Python's onnxruntime, else onnxruntime-node, else none)")
    ap.add_argument("--ort-profile", help="read this ORT profile JSON (made elsewhere) instead of running ORT; "
                    "one batch size")
    ap.add_argument("--ort-skip-runs", type=int, default=1, help="with --ort-profile: untimed model_runs first")
    ap.add_argument("--out-dir", help="profiles, exported and optimised models (default: a temporary folder)")
    ap.add_argument("--budget-s", type=float, help="start no further round once this many seconds are spent "
                    "(a round's share: a second round starts before budget/2, a third before 2/3 of it...)")
    ap.add_argument("--top", type=int, default=12, help="the most expensive primitives / nodes listed per side")
    ap.add_argument("--json", help="write everything to this file")
    ap.add_argument("--check", action="store_true", help="exit 1 unless the profiles parse and add up (the smoke test)")
    a = ap.parse_args()
    a.cnnergy = os.path.abspath(a.cnnergy) if os.path.exists(a.cnnergy) else a.cnnergy
    workdir = a.out_dir or tempfile.mkdtemp(prefix="cpu_infer_profile_")
    os.makedirs(workdir, exist_ok=True)
    batches = [int(b) for b in a.batch.split(",")]
    reqs = [int(r) for r in a.requests.split(",")]
    reqs = reqs * len(batches) if len(reqs) == 1 else reqs
    if len(reqs) != len(batches):
        raise SystemExit("--requests: one value or one per batch size")
    if a.ort_profile and len(batches) != 1:
        raise SystemExit("--ort-profile goes with one --batch")
    model = prepare_model(a, workdir)
    graph = ogs.read_model(model)
    chw = graph["input_shape"][1:]
    runner = None if a.ort_profile else ort_runner(a)
    if not a.ort_profile and runner is None:
        print("ONNX Runtime: neither Python's onnxruntime nor onnxruntime-node; ours only", file=sys.stderr)
    res = {"model": model, "model_name": a.model, "threads": a.threads, "cpus": os.cpu_count(),
           "cnnergy": a.cnnergy, "ort_runner": runner or ("profile file" if a.ort_profile else None),
           "ops_in_model": graph["ops"], "batches": []}
    started = time.time()
    entries = [{"batch": b, "requests": n, "ours": [], "ort": []} for b, n in zip(batches, reqs)]
    for r in range(a.rounds):  # rounds outside, so that --budget-s leaves whole rounds of every batch size
        if r > 0 and a.budget_s is not None and time.time() - started > a.budget_s * r / (r + 1):
            print("--budget-s %g: stopping after %d round(s)" % (a.budget_s, r), file=sys.stderr)
            break
        for entry in entries:
            b, n = entry["batch"], entry["requests"]
            for side in ("ours", "ort"):
                if side == "ort" and runner is None and not a.ort_profile:
                    continue
                if side == "ort" and a.ort_profile and r > 0:
                    continue
                load = os.getloadavg()[0]
                if side == "ours":
                    one = {"load": load, "profiled": run_ours(a, model, b, n, True, workdir),
                           "clean": run_ours(a, model, b, n, False, workdir)}
                elif a.ort_profile:
                    prof = parse_ort_profile(json.load(open(a.ort_profile)), a.ort_skip_runs)
                    prof["top"] = prof["top"][:a.top]
                    one = {"load": None, "profiled": prof, "clean": {"p50_ms": prof["wall_ms_profiled"],
                                                                     "mean_ms": prof["wall_ms_profiled"]}}
                else:
                    one = {"load": load, "profiled": run_ort(a, runner, model, b, chw, n, True, workdir, r == 0),
                           "clean": run_ort(a, runner, model, b, chw, n, False, workdir)}
                one["round"] = r
                if side == "ours" and r == 0:  # the variants once, beside the default's first round
                    for v in a.variant:
                        label, _, only = v.partition("=")[0].partition("@")
                        if not only or b in [int(x) for x in only.split("+")]:
                            one.setdefault("variants", {})[label] = run_ours(a, model, b, n, False, workdir, v)
                entry[side].append(one)
                print("batch %d round %d %s: load %.2f, clean p50 %.2f ms, profiled: operators %.2f of %.2f ms"
                      % (b, r, side, load, one["clean"]["p50_ms"], one["profiled"]["operator_ms"],
                         one["profiled"]["wall_ms_profiled"]), file=sys.stderr)
        res["batches"] = [dict(e, summary=summarize(e["ours"], e["ort"])) for e in entries]
        if a.json:  # after every round: a run cut short keeps the rounds it finished
            with open(a.json, "w") as f:
                json.dump(res, f, indent=1)
    opt = os.path.join(workdir, "ort_optimized.onnx")
    if os.path.exists(opt):
        res["ops_in_ort_optimized_model"] = ogs.read_model(opt)["ops"]
    res["seconds"] = time.time() - started
    ours0 = res["batches"][0]["ours"][0]["profiled"]
    print("ours: %s; oneDNN %s, %s threads, %s" % (ours0.get("cpu_path"), ours0.get("onednn"), ours0.get("threads"),
                                                   ours0.get("isa")))
    print("model ops: " + ", ".join("%s x%d" % kv for kv in sorted(graph["ops"].items())))
    if "ops_in_ort_optimized_model" in res:
        print("ORT's optimised graph: " + ", ".join("%s x%d" % kv for kv in
                                                   sorted(res["ops_in_ort_optimized_model"].items())))
    for e in res["batches"]:
        print_table(a.model, e["batch"], e["summary"], max(len(e["ours"]), len(e["ort"])))
        for r in range(max(len(e["ours"]), len(e["ort"]))):
            o = e["ours"][r] if r < len(e["ours"]) else None
            t = e["ort"][r] if r < len(e["ort"]) else None
            print("  round %d: ours clean p50 %s ms (load %s), ORT clean p50 %s ms (load %s)" % (
                r, "%.3f" % o["clean"]["p50_ms"] if o else "-", "%.2f" % o["load"] if o else "-",
                "%.3f" % t["clean"]["p50_ms"] if t else "-",
                "%.2f" % t["load"] if t and t["load"] is not None else "-"))
        for r in e["ours"]:
            for label, v in r.get("variants", {}).items():
                print("  round %d, ours %-16s p50 %9.3f ms, mean %9.3f ms (default: p50 %9.3f, mean %9.3f)"
                      % (r["round"], label, v["p50_ms"], v["mean_ms"], r["clean"]["p50_ms"], r["clean"]["mean_ms"]))
        for side in ("ours", "ort"):
            if e[side]:
                print("  most expensive, %s (ms per request, round 0):" % side)
                for k, v in e[side][0]["profiled"]["top"][:8]:
                    print("    %8.3f  %s" % (v, k[:150]))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
    if a.check and not check(res):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
