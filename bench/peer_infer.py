#!/usr/bin/env python3
"""Inference peers of `cnnergy infer`, measured on the same model, batch and precision in the same call.

Engines: PyTorch eager (torch.inference_mode, channels-last for bf16/fp16), eager captured in one CUDA
graph (torch.cuda.graph), torch.compile in its default, "reduce-overhead" and "max-autotune" modes, and
ONNX Runtime (torch.onnx.export, whatever execution providers onnxruntime offers: with only the CPU
one, ONNX Runtime runs in the CPU cells alone). Closed loop like ours: latency p50/p90/p99/max with the
input already on the device, one call + synchronize per request; throughput from back-to-back calls
in windows of >= --window-s; energy per image from the NVML energy counter over those windows (RAPL on
the CPU where readable); peak memory (torch.cuda.max_memory_allocated; CPU: not measured).

Every torch.compile mode runs in a child process under its own time limit (--compile-timeout), so one
hang or crash is reported as that mode's failure, with its error, and the script goes on.
Output (--out): {"runs": [doc, ...]}, each doc shaped like `cnnergy infer --json` (model, device,
precision, layout, energy_source, results: [{batch, mode, device: {p50_ms ...}, images_per_s,
joules_per_image, peak_memory_mib, status?}]) plus "engine". bench/infer_compare.py joins it with ours.
Plain Python over torch, torchvision, pynvml, onnxruntime (each optional but torch).
"""
import argparse
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback

import torch
import torch.cuda.profiler  # start()/stop() for --profile-range
import torchvision

COMPILE_MODES = {"compile": "default", "reduce-overhead": "reduce-overhead", "max-autotune": "max-autotune"}
ALL_ENGINES = ["eager", "graph"] + list(COMPILE_MODES) + ["onnxruntime"]
OOM = getattr(torch, "OutOfMemoryError", getattr(torch.cuda, "OutOfMemoryError", MemoryError))
DTYPES = {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


# ---- energy ------------------------------------------------------------------------------------
class Energy:
    """Cumulative joules of the device: NVML's energy counter (GPU) or RAPL's package counters (CPU)."""

    def __init__(self, device):
        self.source, self._read = None, None
        if device == "cuda":
            try:
                import pynvml
                pynvml.nvmlInit()
                index = torch.cuda.current_device()
                visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
                if visible and visible.split(",")[0].strip().isdigit():
                    index = int(visible.split(",")[0])
                h = pynvml.nvmlDeviceGetHandleByIndex(index)
                pynvml.nvmlDeviceGetTotalEnergyConsumption(h)
                self._read = lambda: pynvml.nvmlDeviceGetTotalEnergyConsumption(h) / 1000.0
                self.source = "nvml total energy counter (pynvml)"
            except Exception as exc:  # no pynvml, no driver, no counter: energy not measured
                self.note = f"NVML: {exc}"
        else:
            zones = []
            base = "/sys/class/powercap"
            for z in sorted(os.listdir(base)) if os.path.isdir(base) else []:
                path = os.path.join(base, z, "energy_uj")
                if z.count(":") == 1 and os.access(path, os.R_OK):  # packages only (intel-rapl:N)
                    zones.append(path)
            if zones:
                self._read = lambda: sum(int(open(p).read()) for p in zones) / 1e6
                self.source = f"RAPL ({len(zones)} package(s))"

    def read(self):
        return self._read() if self._read else None


def percentiles(ms):
    ms = sorted(ms)
    rank = lambda p: ms[min(max(math.ceil(p * len(ms)), 1), len(ms)) - 1]  # nearest rank
    return {"count": len(ms), "mean_ms": sum(ms) / len(ms), "p50_ms": rank(0.50), "p90_ms": rank(0.90),
            "p99_ms": rank(0.99), "max_ms": ms[-1]}


def median(v):
    v = sorted(v)
    n = len(v)
    return v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])


def measure(call, sync, batch, energy, args):
    """Closed loop on one callable: latency of call + sync per request, then throughput and energy from
    back-to-back windows. The latency loop stops at --requests or after --latency-s seconds (>= 20)."""
    for _ in range(args.warmup):
        call()
    sync()
    if getattr(args, "profile_range", False) and torch.cuda.is_available():  # ncu --profile-from-start off
        torch.cuda.profiler.start()
        call()
        sync()
        torch.cuda.profiler.stop()
    lat = []
    t_end = time.perf_counter() + args.latency_s
    while len(lat) < args.requests and (len(lat) < 20 or time.perf_counter() < t_end):
        t0 = time.perf_counter()
        call()
        sync()
        lat.append((time.perf_counter() - t0) * 1e3)
    ms_per_batch, j_per_image, watts = [], [], []
    for _ in range(args.windows):
        sync()
        e0, t0, n = energy.read(), time.perf_counter(), 0
        while True:
            call()
            n += 1
            if n % 4 == 0 or batch >= 32:  # a sync now and then bounds the queue, not every call
                sync()
                if time.perf_counter() - t0 >= args.window_s:
                    break
        dt = time.perf_counter() - t0
        e1 = energy.read()
        ms_per_batch.append(dt * 1e3 / n)
        if e0 is not None and e1 is not None and e1 > e0:
            j_per_image.append((e1 - e0) / (n * batch))
            watts.append((e1 - e0) / dt)
    m = median(ms_per_batch)
    return {"batch": batch, "mode": "closed_loop", "device": percentiles(lat), "ms_per_batch": m,
            "images_per_s": batch * 1e3 / m if m > 0 else 0.0,
            "joules_per_image": median(j_per_image) if j_per_image else None,
            "joules_per_image_spread": (max(j_per_image) - min(j_per_image)) if j_per_image else None,
            "average_power_w": median(watts) if watts else None, "windows": len(ms_per_batch)}


# ---- engines -----------------------------------------------------------------------------------
def setup(model_name, precision, device):
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    torch.backends.cudnn.allow_tf32 = precision == "tf32"
    if device == "cpu" and precision != "fp32":
        raise SkipCell(f"the CPU cells run fp32 only ({precision} not run)")
    dtype = DTYPES[precision]
    fmt = torch.channels_last if precision in ("bf16", "fp16") else torch.contiguous_format
    model = getattr(torchvision.models, model_name)(num_classes=1000).eval()
    model = model.to(device=device, dtype=dtype, memory_format=fmt)
    return model, dtype, fmt


def images(batch, dtype, fmt, device):
    torch.manual_seed(1)
    return torch.randn(batch, 3, 224, 224, device=device, dtype=dtype).contiguous(memory_format=fmt)


def torch_cell(engine, model_name, batch, precision, device, energy, args):
    """eager, graph or a torch.compile mode (the latter in a child process: see run_compile_child)."""
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    with torch.inference_mode():
        model, dtype, fmt = setup(model_name, precision, device)
        x = images(batch, dtype, fmt, device)
        if device == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        if engine == "eager":
            call = lambda: model(x)
        elif engine == "graph":
            if device != "cuda":
                raise SkipCell("CUDA graphs need the GPU")
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):  # warm-up off the capture stream (cudnn.benchmark searches here)
                for _ in range(3):
                    model(x)
            torch.cuda.current_stream().wait_stream(s)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                out = model(x)  # noqa: F841 (kept alive with the graph's pool)
            call = g.replay
        else:
            t0 = time.perf_counter()
            mode = None if COMPILE_MODES[engine] == "default" else COMPILE_MODES[engine]
            compiled = torch.compile(model, mode=mode, dynamic=False)  # one static graph per batch size
            for _ in range(3):
                compiled(x)
            sync()
            compile_s = time.perf_counter() - t0
            call = lambda: compiled(x)
        row = measure(call, sync, batch, energy, args)
        if engine in COMPILE_MODES:
            row["compile_s"] = compile_s
        row["peak_memory_mib"] = torch.cuda.max_memory_allocated() / 2**20 if device == "cuda" else None
    return row


def onnx_file(model_name, path):
    """Exports the fp32 model (TorchScript exporter first, the dynamo one where that is gone)."""
    model = getattr(torchvision.models, model_name)(num_classes=1000).eval()
    x = torch.randn(1, 3, 224, 224)
    kw = dict(input_names=["images"], output_names=["logits"], dynamic_axes={"images": {0: "n"}, "logits": {0: "n"}},
              opset_version=17)
    try:
        torch.onnx.export(model, (x,), path, dynamo=False, **kw)
    except TypeError:  # an older torch without the dynamo argument
        torch.onnx.export(model, (x,), path, **kw)
    except Exception as first:  # the TorchScript exporter gone or failing: the dynamo one (needs onnxscript)
        try:
            torch.onnx.export(model, (x,), path, dynamo=True, input_names=["images"], output_names=["logits"],
                              dynamic_shapes={"x": {0: torch.export.Dim("n", min=1, max=4096)}})
        except Exception as second:
            raise RuntimeError(f"torch.onnx.export: TorchScript exporter: {error_text(first)[:200]}; "
                               f"dynamo exporter: {error_text(second)[:200]}") from second
    return path


def onnxruntime_cell(model_name, batch, precision, device, energy, args, cache):
    import numpy as np
    import onnxruntime as ort
    providers = ort.get_available_providers()
    gpu_eps = [p for p in providers if p in ("TensorrtExecutionProvider", "CUDAExecutionProvider")]
    if device == "cuda" and not gpu_eps:
        raise SkipCell(f"onnxruntime offers {providers}: no GPU execution provider here (it runs in the CPU cells)")
    if precision != "fp32":
        raise SkipCell(f"the ONNX Runtime cells run the fp32 export only ({precision} not run)")
    if model_name not in cache:
        cache[model_name] = onnx_file(model_name, os.path.join(tempfile.mkdtemp(), model_name + ".onnx"))
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if args.threads > 0:
        so.intra_op_num_threads = args.threads
    eps = ["CUDAExecutionProvider" if "CUDAExecutionProvider" in gpu_eps else gpu_eps[0]] if device == "cuda" else \
        ["CPUExecutionProvider"]
    sess = ort.InferenceSession(cache[model_name], so, providers=eps)
    x = np.random.default_rng(1).standard_normal((batch, 3, 224, 224), dtype=np.float32)
    row = measure(lambda: sess.run(None, {"images": x}), lambda: None, batch, energy, args)
    row["provider"] = sess.get_providers()[0]
    row["peak_memory_mib"] = None
    if device == "cuda":
        row["note"] = "host input (numpy): the copies are in the latency"
    return row


class SkipCell(Exception):
    pass


# ---- torch.compile in a child process under a time limit ---------------------------------------
def run_compile_child(engine, model_name, batches, precision, device, args):
    """All batches of one compile mode in one child (one process, one compile cache); returns rows."""
    spec = dict(engine=engine, model=model_name, batches=batches, precision=precision, device=device,
                requests=args.requests, latency_s=args.latency_s, warmup=args.warmup, windows=args.windows,
                window_s=args.window_s, profile_range=args.profile_range)
    proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--child", json.dumps(spec)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    CHILDREN.append(proc)
    try:
        out, err = proc.communicate(timeout=args.compile_timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the child and its compile workers
        out, err = proc.communicate()
        return [fail_row(b, f"failed: timed out after {args.compile_timeout:.0f} s (--compile-timeout)") for b in batches]
    rows = []
    for line in out.splitlines():
        if line.startswith("ROW "):
            rows.append(json.loads(line[4:]))
    done = {r["batch"] for r in rows}
    if proc.returncode != 0 or len(done) < len(batches):
        tail = " | ".join(l.strip() for l in err.strip().splitlines()[-3:])[-600:]
        rows += [fail_row(b, f"failed: child exited {proc.returncode}: {tail}") for b in batches if b not in done]
    return rows


CHILDREN = []  # compile children (own process groups): killed with us, so none outlives a `timeout`


def on_term(signum, frame):
    for proc in CHILDREN:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
    sys.exit(128 + signum)


def child_main(spec_text):
    spec = json.loads(spec_text)
    args = argparse.Namespace(**{k: spec[k] for k in ("requests", "latency_s", "warmup", "windows", "window_s")},
                              profile_range=spec.get("profile_range", False))
    energy = Energy(spec["device"])
    for b in spec["batches"]:
        try:
            row = torch_cell(spec["engine"], spec["model"], b, spec["precision"], spec["device"], energy, args)
        except SkipCell as exc:
            row = fail_row(b, "skipped: " + str(exc))
        except Exception as exc:  # this batch failed; the next may not
            row = fail_row(b, "failed: " + error_text(exc))
        print("ROW " + json.dumps(row), flush=True)
        if spec["device"] == "cuda":
            torch.cuda.empty_cache()


def fail_row(batch, status):
    return {"batch": batch, "mode": "closed_loop", "status": status}


def error_text(exc):
    text = f"{type(exc).__name__}: {exc}".strip().replace("\n", " ")
    return text[:600]


# ---- driver --------------------------------------------------------------------------------------
def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        return child_main(sys.argv[2])
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="resnet50", help="torchvision names, comma-separated")
    ap.add_argument("--batches", default="1,256")
    ap.add_argument("--precisions", default="bf16", help="fp32 (TF32 off), tf32, fp16, bf16")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--engines", default="eager,graph,compile,reduce-overhead,max-autotune,onnxruntime",
                    help="of " + ",".join(ALL_ENGINES))
    ap.add_argument("--compile-cells", default="",
                    help="limit the torch.compile modes to these MODEL:PRECISION pairs (comma-separated; empty: all)")
    ap.add_argument("--requests", type=int, default=300, help="latency requests per cell (at most)")
    ap.add_argument("--latency-s", type=float, default=3.0, help="latency loop stops after this (>= 20 requests)")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--windows", type=int, default=3)
    ap.add_argument("--window-s", type=float, default=1.0, help="energy window length, >= 1 s for NVML")
    ap.add_argument("--compile-timeout", type=float, default=150, help="seconds per torch.compile mode (all batches)")
    ap.add_argument("--threads", type=int, default=0, help="CPU threads (torch and ONNX Runtime); 0: their default")
    ap.add_argument("--profile-range", action="store_true",
                    help="one call after each cell's warm-up inside torch.cuda.profiler.start()/stop() (for ncu "
                         "--profile-from-start off)")
    ap.add_argument("--out", help="JSON file")
    args = ap.parse_args()
    engines = [e for e in args.engines.split(",") if e]
    for e in engines:
        if e not in ALL_ENGINES:
            ap.error(f"unknown engine {e} (of {','.join(ALL_ENGINES)})")
    if args.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: torch sees no GPU")
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    batches = [int(b) for b in args.batches.split(",") if b]
    compile_cells = {c for c in args.compile_cells.split(",") if c}
    energy = Energy(args.device)
    device_name = torch.cuda.get_device_name() if args.device == "cuda" else cpu_name()
    runs, onnx_cache = [], {}
    for model_name in [m for m in args.models.split(",") if m]:
        for precision in [p for p in args.precisions.split(",") if p]:
            for engine in engines:
                doc = {"engine": engine_name(engine), "model": model_name, "device": device_name,
                       "precision": precision, "layout": "nhwc" if precision in ("bf16", "fp16") else "nchw",
                       "energy_source": energy.source, "torch": torch.__version__, "results": []}
                if engine == "onnxruntime":
                    doc["layout"] = "nchw"
                if engine in COMPILE_MODES:
                    if compile_cells and f"{model_name}:{precision}" not in compile_cells:
                        continue
                    if args.device == "cuda":
                        torch.cuda.empty_cache()
                    doc["results"] = run_compile_child(engine, model_name, batches, precision, args.device, args)
                else:
                    for b in batches:
                        try:
                            if engine == "onnxruntime":
                                row = onnxruntime_cell(model_name, b, precision, args.device, energy, args, onnx_cache)
                                doc["onnxruntime_providers"] = __import__("onnxruntime").get_available_providers()
                            else:
                                row = torch_cell(engine, model_name, b, precision, args.device, energy, args)
                        except SkipCell as exc:
                            row = fail_row(b, "skipped: " + str(exc))
                        except OOM as exc:
                            row = fail_row(b, "failed: does not fit: " + error_text(exc)[:200])
                        except Exception as exc:  # one engine failing never stops the others
                            row = fail_row(b, "failed: " + error_text(exc))
                            if os.environ.get("PEER_INFER_TRACE"):
                                traceback.print_exc()
                        doc["results"].append(row)
                        if args.device == "cuda":
                            torch.cuda.empty_cache()
                for r in doc["results"]:
                    print_row(doc, r)
                if not all(r.get("status", "").startswith("skipped") for r in doc["results"]):
                    runs.append(doc)  # (an engine that does not apply here is said on the console only)
                write_out(args.out, runs)  # after every engine: a run cut short keeps what it measured


def write_out(path, runs):
    if path:
        with open(path + ".tmp", "w") as f:
            json.dump({"runs": runs, "argv": sys.argv[1:]}, f, indent=1)
        os.replace(path + ".tmp", path)


def engine_name(engine):
    return {"eager": "pytorch-eager", "graph": "pytorch-cuda-graph", "compile": "torch.compile",
            "reduce-overhead": "torch.compile reduce-overhead", "max-autotune": "torch.compile max-autotune",
            "onnxruntime": "onnxruntime"}[engine]


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "cpu"


def print_row(doc, r):
    head = f"{doc['model']:<9} {doc['precision']:<4} batch {r['batch']:>4} {doc['engine']:<30}"
    if "status" in r:
        print(f"{head} {r['status']}", flush=True)
        return
    d = r["device"]
    jpi = r.get("joules_per_image")
    mem = r.get("peak_memory_mib")
    print(f"{head} p50 {d['p50_ms']:8.3f} p99 {d['p99_ms']:8.3f} ms | {r['images_per_s']:10.1f} img/s | "
          f"{'-' if jpi is None else f'{jpi * 1e3:.2f}'} mJ/img | peak {'-' if mem is None else f'{mem:.0f}'} MiB"
          + (f" | compile {r['compile_s']:.0f} s" if "compile_s" in r else ""), flush=True)


if __name__ == "__main__":
    sys.exit(main())
