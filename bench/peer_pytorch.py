#!/usr/bin/env python3
"""PyTorch peer for the training-throughput benchmark (issue: CUDA backend).

Measures, on synthetic data, for the PyTorch twins of cnnergy's 15 zoo models (bench/peer_zoo.py:
torchvision's where our zoo copies torchvision, torch.nn definitions for the others, each at the zoo's
input shape and class count; the cross-entropy labels use that class count) and for other torchvision
models (e.g. mobilenet_v2: 3x224x224, 1000 classes), --image overriding the size of 3-channel square
inputs: training throughput (images/s), per-phase time (forward, backward, update; CUDA events, no
host sync inside the measured loop) and peak GPU memory, in fp32 (TF32 off), tf32, bf16 (autocast +
channels-last) and fp16 (autocast + channels-last + GradScaler, PyTorch's own dynamic loss scaling,
whose step reads the overflow flag on the host), plus torch.compile for chosen cells.
--modes runs every cell in each named mode: eager, compile (torch.compile's default),
reduce-overhead (CUDA graphs), max-autotune-no-cudagraphs, max-autotune. torch.compile's speed varies
between runs and machines, so each compiled cell runs --compile-repeats times (default 2) and keeps
its best run (its peak memory the highest run's: the first, fresh one, with cudnn.benchmark's trials); a mode that fails is reported as failed with its error, and the others go on.
Writes one JSON object per cell to --out (a JSON list) and prints a table. Run on the same GPU, in
the same call, as cnnergy's own benchmark so the two are comparable.
Each cell also reports first_step_s: the time from the start of the model build (CUDA context and
cuDNN loading included in the first cell) to the first timed iteration, i.e. model build + the
--warmup iterations, where cudnn.benchmark does its algorithm search (the "time to first step"
cnnergy's benchmark reports as its own first_step_s).
--profile-range brackets each cell's last timed iteration with torch.cuda.profiler.start()/stop()
(after the warm-up: torch.compile and cudnn.benchmark are done), for ncu --profile-from-start off.
--windows N (with --cnnergy-python DIR, the package cnnergy's build puts under BUILD/python) adds
energy per image: after the timed iterations, N windows of the same step back to back for at least
--window-s seconds each, metered by cnnergy's Python windows (cnnergy.Monitor: NVML's energy counter,
sampled off the training thread), as bench_train_throughput --windows meters ours: the same counter,
read the same way, in the same call. The median window gives joules_per_image, the others its range.
Only read: no GPU setting is changed.
"""
import argparse
import json
import os
import sys
import time

import torch
import torch._dynamo  # reset() between compiled runs
import torch.cuda.profiler  # start()/stop() for --profile-range
import torchvision

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # peer_zoo.py beside this file (.carry/ too)
import peer_zoo  # noqa: E402


def build(name, image):
    """(model, C x H x W, classes): a zoo model through peer_zoo, another torchvision model at 3x224x224
    with 1000 classes; image (if given) replaces H and W of a 3-channel square input."""
    chw = peer_zoo.ZOO[name][0] if name in peer_zoo.ZOO else (3, 224, 224)
    if image and chw[0] == 3 and chw[1] == chw[2]:
        chw = (3, image, image)
    if name in peer_zoo.ZOO:
        return peer_zoo.build(name, chw)
    return getattr(torchvision.models, name)(num_classes=1000), chw, 1000


COMPILE_MODES = ("compile", "reduce-overhead", "max-autotune-no-cudagraphs", "max-autotune")


def energy_windows(monitor, step, batch, step_s, windows, window_s):
    """Joules per image over `windows` windows of ceil(window_s / step_s) steps (>= 3) each, the
    device synchronised at both edges. step_s: the timed iterations' seconds per step."""
    n = max(3, int(window_s / step_s) + 1)
    step()  # one untimed step, as ours (measure/window.hpp's warm-up)
    rows = []
    for _ in range(windows):
        torch.cuda.synchronize()
        monitor.begin_window("peer")
        for _ in range(n):
            step()
        torch.cuda.synchronize()
        rows.append(monitor.end_window("peer"))
    per_image = sorted(m.energy_j / (n * batch) for m in rows if m.energy_j is not None)
    times = sorted(m.time_s for m in rows)
    out = {"source": rows[0].source if rows else "", "windows": windows, "window_s": window_s,
           "iterations_per_window": n, "images_per_s": n * batch / times[len(times) // 2],
           "joules_per_image": None, "joules_per_image_min": None, "joules_per_image_max": None,
           "watts": None, "short_window": any(m.below_sensor_period for m in rows)}
    if per_image and len(per_image) == len(rows):
        watts = sorted(m.energy_j / m.time_s for m in rows)
        out.update(joules_per_image=per_image[len(per_image) // 2], joules_per_image_min=per_image[0],
                   joules_per_image_max=per_image[-1], watts=watts[len(watts) // 2])
    return out


def run_cell(name, batch, precision, compiled, iters, warmup, image, profile_range=False, energy=None,
             channels_last="auto"):
    """compiled: False (eager), True or "compile" (torch.compile's default mode), or a mode name.
    energy: None, or (monitor, windows, window_s) for energy windows after the timed iterations."""
    t_build = time.perf_counter()  # time to first step: from here to the first timed iteration
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    torch.backends.cudnn.allow_tf32 = precision == "tf32"
    dev = torch.device("cuda")
    model, chw, classes = build(name, image)
    model = model.to(dev)
    bf16 = precision == "bf16"
    fp16 = precision == "fp16"  # autocast fp16 with PyTorch's dynamic loss scaling (GradScaler)
    half = torch.bfloat16 if bf16 else torch.float16
    nhwc = channels_last == "on" or (channels_last == "auto" and (bf16 or fp16))
    fmt = torch.channels_last if nhwc else torch.contiguous_format
    model = model.to(memory_format=fmt)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    x = torch.randn(batch, *chw, device=dev).to(memory_format=fmt)
    y = torch.randint(0, classes, (batch,), device=dev)
    loss_fn = torch.nn.CrossEntropyLoss()
    if compiled in (True, "compile"):
        fwd = torch.compile(model)
    elif compiled:
        fwd = torch.compile(model, mode=compiled)
    else:
        fwd = model

    def forward():
        with torch.autocast("cuda", dtype=half, enabled=bf16 or fp16):
            return loss_fn(fwd(x), y)

    scaler = torch.amp.GradScaler("cuda", enabled=fp16)

    def backward_update(loss, marks=None):
        scaler.scale(loss).backward()
        if marks:
            marks[0].record()
        scaler.step(opt)
        scaler.update()

    torch.cuda.reset_peak_memory_stats()
    try:
        for _ in range(warmup):
            opt.zero_grad(set_to_none=True)
            backward_update(forward())
        torch.cuda.synchronize()
        ev = [[torch.cuda.Event(enable_timing=True) for _ in range(4)] for _ in range(iters)]
        t0 = time.perf_counter()
        first_step_s = t0 - t_build
        for i in range(iters):
            e = ev[i]
            profiled = profile_range and i + 1 == iters
            if profiled:  # synchronized on both sides: the range holds exactly this step's kernels
                torch.cuda.synchronize()
                torch.cuda.profiler.start()
            e[0].record()
            opt.zero_grad(set_to_none=True)
            loss = forward()
            e[1].record()
            backward_update(loss, [e[2]])
            e[3].record()
            if profiled:
                torch.cuda.synchronize()
                torch.cuda.profiler.stop()
        torch.cuda.synchronize()
        wall = time.perf_counter() - t0
        peak_mib = torch.cuda.max_memory_allocated() / 2**20  # before the windows: the timed steps'

        def step():
            opt.zero_grad(set_to_none=True)
            backward_update(forward())

        windows = energy_windows(energy[0], step, batch, wall / iters, energy[1], energy[2]) if energy else None
    except torch.OutOfMemoryError as exc:
        return {"status": "does_not_fit", "error": str(exc)[:200], "input": list(chw), "classes": classes}
    f = sorted(e[0].elapsed_time(e[1]) for e in ev)
    b = sorted(e[1].elapsed_time(e[2]) for e in ev)
    u = sorted(e[2].elapsed_time(e[3]) for e in ev)
    med = lambda v: v[len(v) // 2]
    return {
        "status": "ok",
        "images_per_s": batch * iters / wall,
        "iter_ms": wall * 1e3 / iters,
        "forward_ms": med(f), "backward_ms": med(b), "update_ms": med(u),
        "peak_mem_mib": peak_mib, "layout": "nhwc" if nhwc else "nchw",
        "first_step_s": first_step_s, "warmup": warmup, "input": list(chw), "classes": classes,
        **({"energy": windows} if windows else {}),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="resnet50,resnet34,vgg16,alexnet")
    ap.add_argument("--batches", default="64,128,256")
    ap.add_argument("--precisions", default="fp32,tf32,bf16", help="comma list of fp32, tf32, bf16, fp16")
    ap.add_argument("--compile", default="resnet50:256:bf16", help="model:batch:precision cells also run with torch.compile")
    ap.add_argument("--modes", default="",
                    help="comma list of eager," + ",".join(COMPILE_MODES) + ": every cell in each mode "
                         "(replaces the eager-only cells and --compile)")
    ap.add_argument("--compile-repeats", type=int, default=2,
                    help="runs of each compiled cell; the best is kept (torch.compile varies run to run)")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--image", type=int, default=None,
                    help="input height and width for models whose zoo input is 3-channel and square "
                         "(default: each model's own, e.g. 224, 227 caffenet, 231 overfeat, 299 inception)")
    ap.add_argument("--profile-range", action="store_true",
                    help="bracket each cell's last timed iteration with torch.cuda.profiler.start()/stop()")
    ap.add_argument("--channels-last", default="auto", choices=("auto", "on", "off"),
                    help="model and input in channels-last memory format: auto (bf16 and fp16), on (every precision: "
                         "the peer's tf32 at its best), off")
    ap.add_argument("--windows", type=int, default=0,
                    help="energy windows per cell after the timed iterations (needs --cnnergy-python)")
    ap.add_argument("--window-s", type=float, default=3.0, help="minimum length of each energy window, s")
    ap.add_argument("--cnnergy-python", default=None,
                    help="directory holding cnnergy's Python package (BUILD/python, or .carry/python)")
    ap.add_argument("--nvml-index", type=int, default=0, help="NVML index of the GPU the cells run on")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    energy = None
    if a.windows > 0:
        if not a.cnnergy_python:
            ap.error("--windows needs --cnnergy-python (the directory with cnnergy's Python package)")
        sys.path.insert(0, a.cnnergy_python)
        import cnnergy
        energy = (cnnergy.Monitor(gpus=[a.nvml_index]), a.windows, a.window_s)
    cells = []
    modes = [x for x in a.modes.split(",") if x]
    for x in modes:
        if x != "eager" and x not in COMPILE_MODES:
            ap.error(f"unknown mode {x!r} (choices: eager, {', '.join(COMPILE_MODES)})")
    for p in filter(None, a.precisions.split(",")):
        if p not in ("fp32", "tf32", "bf16", "fp16"):
            ap.error(f"unknown precision {p!r} (choices: fp32, tf32, bf16, fp16)")
    for m in filter(None, a.models.split(",")):  # --precisions "" leaves only the --compile cells
        for b in map(int, filter(None, a.batches.split(","))):
            for p in filter(None, a.precisions.split(",")):
                if not modes:
                    cells.append((m, b, p, False))
                for x in modes:
                    cells.append((m, b, p, False if x == "eager" else x))
    for c in filter(None, a.compile.split(",") if not modes else []):
        m, b, p = c.split(":")
        cells.append((m, int(b), p, True))
    results = []
    print(f"{'model':13} {'batch':>5} {'prec':6} {'mode':26} {'img/s':>9} {'fwd ms':>8} {'bwd ms':>8} {'upd ms':>8} {'peak MiB':>9} {'first s':>8}")
    for m, b, p, comp in cells:
        mode = "eager" if not comp else ("compile" if comp is True else comp)
        r = {"framework": "pytorch " + torch.__version__, "model": m, "batch": b, "precision": p,
             "compiled": bool(comp), "mode": mode}
        if a.profile_range:
            r["profile_range"] = True
        runs = []
        for _ in range(max(1, a.compile_repeats) if comp else 1):
            try:
                runs.append(run_cell(m, b, p, comp, a.iters, a.warmup, a.image, a.profile_range, energy,
                                     a.channels_last))
            except Exception as exc:  # record and go on: one failing cell must not lose the others
                runs.append({"status": "failed", "error": repr(exc)[:300]})
            if comp:  # a fresh compile for the next run and cell
                torch._dynamo.reset()
        ok = [x for x in runs if x["status"] == "ok"]
        r.update(max(ok, key=lambda x: x["images_per_s"]) if ok else runs[-1])
        if comp:
            r["runs_images_per_s"] = [round(x["images_per_s"], 1) for x in ok]
            # Memory is the fresh process's: the first compile's run holds cudnn.benchmark's trial
            # workspaces (as cnnergy's reported peak holds its algorithm search); a later run in the
            # same process finds its algorithms cached and may peak lower (ResNet-34 fp32 b64 on an
            # H200: 4,678 against 2,312 MiB). So the peak is the highest run's, not the fastest's.
            if ok:
                r["runs_peak_mem_mib"] = [round(x["peak_mem_mib"]) for x in ok]
                r["peak_mem_mib"] = max(x["peak_mem_mib"] for x in ok)
        results.append(r)
        if r["status"] == "ok":
            print(f"{m:13} {b:5d} {p:6} {mode:26} {r['images_per_s']:9.1f} {r['forward_ms']:8.2f} {r['backward_ms']:8.2f} {r['update_ms']:8.2f} {r['peak_mem_mib']:9.0f} {r['first_step_s']:8.2f}", flush=True)
            e = r.get("energy")
            if e and e["joules_per_image"] is not None:
                print(f"    energy ({e['source']}): {e['joules_per_image']:.4f} J/image [{e['joules_per_image_min']:.4f}, "
                      f"{e['joules_per_image_max']:.4f}] over {e['windows']} windows of {e['iterations_per_window']} steps; "
                      f"{e['watts']:.0f} W; {e['images_per_s']:.1f} img/s", flush=True)
            elif e:
                print(f"    energy: not measured ({e['source'] or 'no energy source'})", flush=True)
        else:
            print(f"{m:13} {b:5d} {p:6} {mode:26} {r['status']}: {r.get('error','')[:80]}", flush=True)
        with open(a.out, "w") as fh:
            json.dump({"device": torch.cuda.get_device_name(0), "results": results}, fh, indent=1)
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
