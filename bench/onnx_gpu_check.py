#!/usr/bin/env python3
"""torchvision models through our ONNX importer on the GPU: each model (random weights, batch-norm
statistics calibrated as in tests/onnx/torchvision_compare.py, eval mode) is exported by PyTorch to
ONNX (opset 13) and run by `cnnergy infer MODEL.onnx --inputs X.npy --outputs Y.npy` with --device
cuda --precision fp32, --device cuda --precision bf16 and --device cpu. Targets:
  * fp32 GPU against our CPU: max abs difference <= 1e-4 x max abs logit;
  * bf16 GPU top-1 agreement with fp32 >= 99 %;
  * sanity: PyTorch's own CPU logits against our CPU, max abs difference <= 1e-4 x max abs logit.
The GPU runs see all --inputs random images; the CPU runs (ours, in --jobs processes, and PyTorch's)
the first --count of them (our CPU backend is a single-threaded reference, ~0.3 s per ResNet-50
image). The bf16 target is checked against GPU fp32 over all inputs (GPU fp32 itself checked against
the CPU on the first --count) and reported against CPU fp32 on those --count too.
Prints a table, writes JSON after every model, exits 1 if a target is missed or a model fails. No
new model starts after --budget-s seconds. --no-gpu skips the cuda runs (for a machine without one).

An fp64 reference, for telling our GPU's error from the model's conditioning on the inputs: on the
first --count inputs PyTorch also runs a deep copy of the same eval-mode model in float64 on the CPU
(`.double()`, inputs in float64, in chunks of 16), and each fp32 runtime's logits are compared with
it as max abs difference / max abs fp64 logit: our GPU fp32 (its first --count rows), our CPU fp32,
PyTorch's CPU fp32 and, where a GPU is there and --no-gpu is not given, PyTorch's GPU fp32 with TF32
off (matmul and cuDNN; cudnn.benchmark left as it is). Also reported: our GPU fp32's fp64 error over
PyTorch GPU fp32's (PyTorch CPU fp32's where PyTorch has no GPU), with a line per model saying
whether it is within 2x, and the input where our GPU and our CPU differ most with every runtime's
error against fp64 on that input (same normalisation), so one sees whether all of them are off
there (the model's conditioning) or only ours. Reported only: no target, no effect on the exit code.

On the lent machine (see scripts/device_run.sh onnx-gpu, which sets the library paths):
  /opt/torch/.venv/bin/python bench/onnx_gpu_check.py --build .carry --json out.json
Here: /usr/bin/python3 bench/onnx_gpu_check.py --build build/release --no-gpu --models shufflenet_v2_x0_5 \\
        --inputs 8 --count 8 --size 96
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import time

DEFAULT_MODELS = ["resnet50", "mobilenet_v2", "mobilenet_v3_large", "efficientnet_b0", "shufflenet_v2_x1_0",
                  "regnet_y_400mf", "densenet121", "inception_v3"]


def calibrate_batch_norm(torch, model, size):
    """As tests/onnx/torchvision_compare.py: random weights with batch norm at mean 0 / variance 1 give
    logits of absurd scale; running statistics of two random batches keep them normal. Ends in eval."""
    for m in model.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            m.reset_running_stats()
            m.momentum = None  # cumulative average
    model.train()
    with torch.no_grad():
        for _ in range(2):
            model(torch.randn(4, 3, size, size))
    model.eval()


def export(torch, model, x, path):
    """The TorchScript exporter at opset 13 (what the CI test uses; torch without the dynamo argument
    too), the dynamo one at opset 18 where the TorchScript one is gone or fails. Returns which."""
    kw = dict(input_names=["input"], output_names=["logits"])
    try:
        torch.onnx.export(model, (x,), path, dynamo=False, opset_version=13, do_constant_folding=True, **kw)
        return "torchscript opset 13"
    except TypeError:  # torch before the dynamo argument (Debian's 1.13)
        torch.onnx.export(model, (x,), path, opset_version=13, do_constant_folding=True, **kw)
        return "torchscript opset 13"
    except Exception as first:
        try:
            torch.onnx.export(model, (x,), path, dynamo=True, opset_version=18, **kw)
            return "dynamo opset 18"
        except Exception as second:
            raise RuntimeError(f"torch.onnx.export: TorchScript: {str(first)[:200]}; dynamo: {str(second)[:200]}")


def cnnergy_binary(build):
    for b in (os.path.join(build, "bin", "cnnergy"), build):
        if os.path.isfile(b) and os.access(b, os.X_OK):
            return b
    raise SystemExit(f"no cnnergy binary under {build} (expected {build}/bin/cnnergy)")


def infer(cnnergy, onnx_path, x_path, y_path, flags, batch, timeout=None):
    """One `cnnergy infer --inputs/--outputs` process; its wall seconds. RuntimeError if it fails
    (subprocess.TimeoutExpired after `timeout` seconds)."""
    cmd = [cnnergy, "infer", onnx_path, "--inputs", x_path, "--outputs", y_path, "--batch", str(batch)] + flags
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(flags)}: exit {p.returncode}: {(p.stderr or p.stdout).strip()[-400:]}")
    return time.perf_counter() - t0


def infer_cpu_sharded(np, cnnergy, onnx_path, x, work, jobs, batch, timeout=None):
    """Our CPU backend on x, split over `jobs` processes (each a contiguous shard); the logits in order."""
    shards = [s for s in np.array_split(np.arange(len(x)), max(1, min(jobs, len(x)))) if len(s)]
    procs = []
    t0 = time.perf_counter()
    for k, idx in enumerate(shards):
        xp, yp = os.path.join(work, f"cpu_x{k}.npy"), os.path.join(work, f"cpu_y{k}.npy")
        np.save(xp, x[idx])
        cmd = [cnnergy, "infer", onnx_path, "--device", "cpu", "--inputs", xp, "--outputs", yp, "--batch",
               str(min(batch, len(idx)))]
        procs.append((subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True), yp))
    outs = []
    for p, yp in procs:
        try:
            text = p.communicate(timeout=None if timeout is None else max(1.0, t0 + timeout - time.perf_counter()))[0]
        except subprocess.TimeoutExpired:
            for q, _ in procs:
                q.kill()
                q.wait()
            raise
        if p.returncode != 0:
            raise RuntimeError(f"--device cpu: exit {p.returncode}: {text.strip()[-400:]}")
        outs.append(np.load(yp))
    return np.concatenate(outs), time.perf_counter() - t0


def closeness(np, want, got):
    diff = float(np.max(np.abs(want - got)))
    scale = float(np.max(np.abs(want)))
    return {"max_abs_diff": diff, "max_abs_logit": scale, "ratio": diff / scale if scale > 0 else float("inf"),
            "top1_agreement": float(np.mean(np.argmax(want, 1) == np.argmax(got, 1)))}


def fp64_reference(torch, model, x, count, chunk=16):
    """PyTorch's logits of the first `count` rows of x in float64 on the CPU: a deep copy of the
    (eval-mode) model in .double(), the inputs in float64, `chunk` inputs at a time. numpy float64."""
    import copy
    m64 = copy.deepcopy(model).cpu().double().eval()
    with torch.no_grad():
        out = torch.cat([m64(torch.from_numpy(x[k:min(k + chunk, count)]).double())
                         for k in range(0, count, chunk)]).numpy()
    del m64
    return out


def pytorch_gpu_fp32(torch, model, x, count, chunk=16):
    """PyTorch's fp32 logits of the first `count` rows of x on the GPU with TF32 off (matmul and
    cuDNN; cudnn.benchmark untouched), from a deep copy of the model; the flags and the GPU memory
    cache are restored / emptied afterwards (our GPU runs of later models share the card). numpy."""
    import copy
    flags = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    try:
        mg = copy.deepcopy(model).float().eval().cuda()
        with torch.no_grad():
            out = torch.cat([mg(torch.from_numpy(x[k:min(k + chunk, count)]).cuda()).cpu()
                             for k in range(0, count, chunk)]).numpy()
        del mg
        return out
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = flags
        torch.cuda.empty_cache()


FP64_RUNTIMES = ("ours_gpu_fp32", "ours_cpu_fp32", "pytorch_cpu_fp32", "pytorch_gpu_fp32")


def fp64_errors(np, ref64, runs, ours_cpu):
    """Fields of the fp64 comparison. runs: runtime name (FP64_RUNTIMES) -> its fp32 logits of the
    same `count` inputs as ref64, or None where it did not run. Errors are max abs difference / max
    abs fp64 logit (over all `count` inputs, the per-input ones too, so all are on one scale)."""
    scale = float(np.max(np.abs(ref64)))
    norm = scale if scale > 0 else float("inf")
    out = {"fp64_max_abs_logit": scale}
    for k in FP64_RUNTIMES:
        y = runs.get(k)
        out["fp64_err_" + k] = None if y is None else float(np.max(np.abs(y.astype(np.float64) - ref64))) / norm
    gpu = out["fp64_err_ours_gpu_fp32"]
    base = "pytorch_gpu_fp32" if out["fp64_err_pytorch_gpu_fp32"] is not None else "pytorch_cpu_fp32"
    den = out["fp64_err_" + base]
    out["fp64_err_ratio_ours_gpu_fp32_to_pytorch"] = (
        None if gpu is None else (gpu / den if den > 0 else (1.0 if gpu == 0 else float("inf"))))
    out["fp64_err_ratio_ours_gpu_fp32_to_pytorch_baseline"] = None if gpu is None else base
    out["fp64_err_ours_gpu_fp32_within_2x_of_pytorch"] = (
        None if gpu is None else bool(out["fp64_err_ratio_ours_gpu_fp32_to_pytorch"] <= 2.0))
    cpu, pt = out["fp64_err_ours_cpu_fp32"], out["fp64_err_pytorch_cpu_fp32"]
    out["fp64_err_ratio_ours_cpu_fp32_to_pytorch_cpu_fp32"] = (
        cpu / pt if pt > 0 else (1.0 if cpu == 0 else float("inf")))
    # The per-input picture: the input where our GPU and our CPU differ most (without GPU runs: where
    # our CPU is farthest from fp64), and every runtime's error against fp64 on that input.
    if runs.get("ours_gpu_fp32") is not None:
        per = np.max(np.abs(runs["ours_gpu_fp32"].astype(np.float64) - ours_cpu.astype(np.float64)), axis=1)
        by = "max abs diff ours gpu fp32 vs ours cpu fp32"
    else:
        per = np.max(np.abs(ours_cpu.astype(np.float64) - ref64), axis=1)
        by = "max abs diff ours cpu fp32 vs fp64 (no GPU runs)"
    i = int(np.argmax(per))
    out["fp64_worst_input"] = {
        "index": i, "chosen_by": by, "max_abs_diff": float(per[i]), "max_abs_diff_over_fp64_max_abs_logit": float(per[i]) / norm,
        "fp64_max_abs_logit_this_input": float(np.max(np.abs(ref64[i]))),
        "fp64_top1_margin_this_input": float(np.diff(np.sort(ref64[i])[-2:])[0]) / norm,
        **{"fp64_err_" + k: (None if runs.get(k) is None else
                             float(np.max(np.abs(runs[k][i].astype(np.float64) - ref64[i]))) / norm)
           for k in FP64_RUNTIMES}}
    return out


def check_model(name, args, torch, torchvision, np, cnnergy, work):
    row = {"model": name, "status": "ok", "missed": []}
    t0 = time.perf_counter()
    size = args.size or (299 if name == "inception_v3" else 224)
    kwargs = {"aux_logits": False, "init_weights": True} if name in ("googlenet", "inception_v3") else {}
    torch.manual_seed(args.seed)
    model = getattr(torchvision.models, name)(**kwargs)
    calibrate_batch_norm(torch, model, size)
    path = os.path.join(work, name + ".onnx")
    row["exporter"] = export(torch, model, torch.randn(1, 3, size, size), path)
    rng = np.random.default_rng(args.seed)
    x = rng.standard_normal((args.inputs, 3, size, size), dtype=np.float32)
    x_path = os.path.join(work, "x.npy")
    np.save(x_path, x)
    count = min(args.count, args.inputs)
    row.update(input=size, inputs=args.inputs, count=count, export_s=time.perf_counter() - t0)

    cpu, row["cpu_s"] = infer_cpu_sharded(np, cnnergy, path, x[:count], work, args.jobs, args.cpu_batch)
    t1 = time.perf_counter()
    with torch.no_grad():
        ref = torch.cat([model(torch.from_numpy(x[k:min(k + 16, count)])) for k in range(0, count, 16)]).numpy()
    row["pytorch_s"] = time.perf_counter() - t1
    row["pytorch_vs_cpu"] = closeness(np, ref, cpu)
    ref64 = None
    try:  # the fp64 reference is reported only: a failure of it is noted, not a failed model
        t1 = time.perf_counter()
        ref64 = fp64_reference(torch, model, x, count)
        row["fp64_s"] = time.perf_counter() - t1
    except Exception as e:
        row["fp64_failed"] = f"{type(e).__name__}: {str(e)[:300]}"
    if not row["pytorch_vs_cpu"]["ratio"] <= 1e-4:
        row["missed"].append("pytorch vs cpu")
    if not args.no_gpu:
        y32, y16 = os.path.join(work, "y_fp32.npy"), os.path.join(work, "y_bf16.npy")
        extra = args.gpu_flags.split()
        row["gpu_flags"] = args.gpu_flags
        row["gpu_fp32_s"] = infer(cnnergy, path, x_path, y32, ["--device", "cuda", "--precision", "fp32"] + extra, args.batch)
        row["gpu_bf16_s"] = infer(cnnergy, path, x_path, y16, ["--device", "cuda", "--precision", "bf16"] + extra, args.batch)
        g32, g16 = np.load(y32), np.load(y16)
        row["gpu_fp32_vs_cpu"] = closeness(np, cpu, g32[:count])
        row["gpu_bf16_vs_cpu"] = closeness(np, cpu, g16[:count])
        row["gpu_bf16_vs_gpu_fp32"] = closeness(np, g32, g16)
        # How close the decisions are: (top-1 - top-2 logit) / max abs logit, median over the inputs.
        top2 = np.sort(g32, axis=1)[:, -2:]
        row["fp32_top1_margin_median"] = float(np.median(top2[:, 1] - top2[:, 0]) / max(float(np.abs(g32).max()), 1e-30))
        if not row["gpu_fp32_vs_cpu"]["ratio"] <= 1e-4:
            row["missed"].append("fp32 gpu vs cpu")
        if not row["gpu_bf16_vs_gpu_fp32"]["top1_agreement"] >= 0.99:
            row["missed"].append("bf16 top-1")
    runs = {"ours_cpu_fp32": cpu, "pytorch_cpu_fp32": ref,
            "ours_gpu_fp32": None if args.no_gpu else g32[:count], "pytorch_gpu_fp32": None}
    if ref64 is not None and not args.no_gpu:
        if torch.cuda.is_available():
            try:
                t1 = time.perf_counter()
                runs["pytorch_gpu_fp32"] = pytorch_gpu_fp32(torch, model, x, count)
                row["pytorch_gpu_fp32_s"] = time.perf_counter() - t1
                row["pytorch_gpu_fp32_device"] = torch.cuda.get_device_name()
                row["pytorch_gpu_fp32_tf32"] = False
            except Exception as e:
                row["pytorch_gpu_fp32_failed"] = f"{type(e).__name__}: {str(e)[:300]}"
        else:
            row["pytorch_gpu_fp32_failed"] = "torch.cuda.is_available() is False"
    if ref64 is not None:
        row.update(fp64_errors(np, ref64, runs, cpu))
    row["seconds"] = time.perf_counter() - t0
    if row["missed"]:
        row["status"] = "MISSED"
    for f in os.listdir(work):  # 1000 images at 299 x 299 are 1 GB: nothing stays
        os.remove(os.path.join(work, f))
    return row


def fmt(row):
    def dash(spec):  # "-" in the column's width, so the table stays aligned
        width = "".join(ch for ch in spec.split(".")[0] if ch.isdigit())
        return format("-", ">" + width) if width else "-"

    def c(key, field, spec):
        v = row.get(key, {}).get(field)
        return format(v, spec) if v is not None else dash(spec)
    if row["status"] == "error":
        return f"{row['model']:20s} error: {row['error'][:160]}"
    def f(key, spec, d=row):
        v = d.get(key)
        return format(v, spec) if v is not None else dash(spec)
    line = (f"{row['model']:20s} {row['input']:4d} {c('gpu_fp32_vs_cpu', 'ratio', '10.2e')} "
            f"{c('gpu_bf16_vs_gpu_fp32', 'top1_agreement', '9.2%')} {c('gpu_bf16_vs_cpu', 'top1_agreement', '9.2%')} "
            f"{c('pytorch_vs_cpu', 'ratio', '10.2e')} {f('fp64_err_ours_gpu_fp32', '9.2e')} "
            f"{f('fp64_err_ours_cpu_fp32', '9.2e')} {f('fp64_err_pytorch_cpu_fp32', '9.2e')} "
            f"{f('fp64_err_pytorch_gpu_fp32', '9.2e')} {f('fp64_err_ratio_ours_gpu_fp32_to_pytorch', '7.2f')} "
            f"{row['seconds']:6.0f}  {row['status']} {' '.join(row['missed'])}")
    if "fp64_failed" in row:
        return line + f"\n    fp64 reference failed: {row['fp64_failed'][:160]}"
    w = row["fp64_worst_input"]
    line += (f"\n    fp64 reference: {row['count']} inputs, max abs logit {row['fp64_max_abs_logit']:.4g}, {row['fp64_s']:.0f} s"
             + (f"; PyTorch GPU fp32 (TF32 off) failed: {row['pytorch_gpu_fp32_failed'][:120]}"
                if "pytorch_gpu_fp32_failed" in row else ""))
    line += (f"\n    worst input #{w['index']} ({w['chosen_by']}: {w['max_abs_diff_over_fp64_max_abs_logit']:.2e} of max abs "
             f"fp64 logit; its fp64 top-1 margin {w['fp64_top1_margin_this_input']:.2e}): error vs fp64 there: "
             f"ours gpu fp32 {f('fp64_err_ours_gpu_fp32', '.2e', w)}, ours cpu fp32 {f('fp64_err_ours_cpu_fp32', '.2e', w)}, "
             f"pytorch cpu fp32 {f('fp64_err_pytorch_cpu_fp32', '.2e', w)}, "
             f"pytorch gpu fp32 {f('fp64_err_pytorch_gpu_fp32', '.2e', w)}")
    within = row.get("fp64_err_ours_gpu_fp32_within_2x_of_pytorch")
    line += ("\n    GPU fp32 error vs fp64 within 2x of PyTorch's: "
             + ("n/a (no GPU runs)" if within is None else
                f"{'yes' if within else 'no'} ({row['fp64_err_ratio_ours_gpu_fp32_to_pytorch']:.2f}x "
                f"{row['fp64_err_ratio_ours_gpu_fp32_to_pytorch_baseline'].replace('_', ' ')})")
             + f"; our CPU fp32's is {row['fp64_err_ratio_ours_cpu_fp32_to_pytorch_cpu_fp32']:.2f}x PyTorch CPU fp32's")
    return line


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--build", default=".carry", help="directory with bin/cnnergy (or the binary itself)")
    ap.add_argument("--models", default=",".join(DEFAULT_MODELS), help="comma-separated torchvision model names")
    ap.add_argument("--inputs", type=int, default=1000, help="random images per model, all run on the GPU")
    ap.add_argument("--count", type=int, default=256, help="of those, how many the CPU runs see (ours, PyTorch's)")
    ap.add_argument("--size", type=int, default=0, help="input size override (default 224, Inception v3 299)")
    ap.add_argument("--batch", type=int, default=100, help="GPU batch of cnnergy infer")
    ap.add_argument("--cpu-batch", type=int, default=8, help="CPU batch of cnnergy infer")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="parallel CPU cnnergy processes")
    ap.add_argument("--budget-s", type=float, default=300, help="no new model starts after this many seconds")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-gpu", action="store_true", help="skip the cuda runs (CPU and PyTorch only)")
    ap.add_argument("--gpu-flags", default="", help="extra cnnergy infer flags of both GPU runs (e.g. '--conv-algo heuristic')")
    ap.add_argument("--work", default="/tmp/cnnergy_onnx_gpu_check")
    ap.add_argument("--json", help="results file, rewritten after every model")
    args = ap.parse_args()
    if args.inputs < 1 or args.count < 1 or args.batch < 1 or args.cpu_batch < 1 or args.jobs < 1:
        ap.error("--inputs, --count, --batch, --cpu-batch and --jobs must be >= 1")
    import numpy as np
    import torch
    import torchvision
    cnnergy = cnnergy_binary(args.build)
    os.makedirs(args.work, exist_ok=True)
    report = {"host": platform.node(), "torch": torch.__version__, "torchvision": torchvision.__version__,
              "cnnergy": cnnergy, "args": vars(args), "models": [], "not_started": []}
    start = time.perf_counter()
    print(f"{'model':20s} {'size':4s} {'fp32/cpu':>10s} {'bf16 top1':>9s} {'(vs cpu)':>9s} {'torch/cpu':>10s} "
          f"{'gpu/fp64':>9s} {'cpu/fp64':>9s} {'pt/fp64':>9s} {'ptgpu/f64':>9s} {'gpu/pt':>7s} {'sec':>6s}  status\n"
          f"  (x/fp64: max abs diff from PyTorch's float64 logits / max abs fp64 logit, first --count inputs: ours "
          f"GPU fp32, ours CPU, PyTorch CPU fp32, PyTorch GPU fp32 TF32 off; gpu/pt: ours GPU's over PyTorch's)",
          flush=True)
    for name in [m for m in args.models.split(",") if m]:
        if time.perf_counter() - start > args.budget_s:
            report["not_started"].append(name)
            continue
        try:
            row = check_model(name, args, torch, torchvision, np, cnnergy, args.work)
        except Exception as e:  # a model that fails to export or run is a failure, the others still run
            row = {"model": name, "status": "error", "error": f"{type(e).__name__}: {e}", "missed": ["error"]}
        report["models"].append(row)
        print(fmt(row), flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(report, f, indent=1)
    bad = [r["model"] for r in report["models"] if r["status"] != "ok"]
    report["seconds"] = time.perf_counter() - start
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    print(f"{len(report['models']) - len(bad)}/{len(report['models'])} models meet every target"
          f"{' (GPU runs skipped)' if args.no_gpu else ''}; {report['seconds']:.0f} s"
          + (f"; not started (budget): {', '.join(report['not_started'])}" if report["not_started"] else "")
          + (f"; missed: {', '.join(bad)}" if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
