#!/usr/bin/env python3
"""Agreement and overhead of cnnergy's Python windows on a PyTorch ResNet-50 training.

Run on a lent GPU from the repository root, with a build tree carried there (the package is used
through its ctypes backend, so the device's Python 3.12 needs no compiler):

    scripts/pack_device.sh    # here, then on the device (carrying .carry):
    source scripts/device_env.sh
    /opt/torch/.venv/bin/python bench/python_window_agreement.py --build .carry --out $OUT

It runs two things and prints their figures:
 1. agreement: `cnnergy monitor --json --jsonl -- python3 this.py --inner agreement` trains
    ResNet-50 (synthetic data, bf16 autocast + channels-last unless --precision) for --epochs epochs
    of --steps steps, measured inside with cnnergy.Monitor windows: the whole training ("run"), each
    epoch, each step. Around the run window it reads pynvml's energy counter. The edges sit on an
    idle GPU (0.5 s of idle before and after) and each pynvml read is taken right after the counter
    changes (a sensor update), so all methods see the same interval. Figures:
      * window vs pynvml counter difference over the same interval (target: within 0.5 %),
      * window vs `cnnergy monitor` of the same run, restricted to the window's interval (its JSON
        lines' counter samples interpolated at the window's edges; target: within 1 %), and the
        monitor's whole-process figure (it also covers start-up, model build and teardown),
      * the sum of the epoch windows vs the run window.
 2. overhead: `python3 this.py --inner overhead` alternates blocks of training steps with the
    module off (sampler stopped) and on (sampler running, a window per block and per step): paired
    blocks, the mean and spread of the step-time difference (target: < 0.5 %), and the cost of
    begin_window/end_window on the training thread (target: < 10 us each).

Defaults (ResNet-50, batch 256, bf16; 4 epochs of 200 steps, then 8 x 2 blocks of 100 steps) take
about 4 minutes on an H100/H200. Results: agreement.json, monitor.json(l), overhead.json,
summary.json under --out.

It NEVER changes a GPU setting (no power limit, no clocks): read-only, as on every lent GPU.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


# --- the training (inner processes) -------------------------------------------------------------
def make_training(args):
    import torch
    import torchvision
    torch.backends.cudnn.benchmark = True
    dev = torch.device("cuda", args.cuda_device)
    bf16 = args.precision == "bf16"
    torch.backends.cuda.matmul.allow_tf32 = args.precision == "tf32"
    torch.backends.cudnn.allow_tf32 = args.precision == "tf32"
    fmt = torch.channels_last if bf16 else torch.contiguous_format
    model = torchvision.models.resnet50(num_classes=1000).to(dev).to(memory_format=fmt)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    x = torch.randn(args.batch, 3, 224, 224, device=dev).to(memory_format=fmt)
    y = torch.randint(0, 1000, (args.batch,), device=dev)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()

    def sync():
        torch.cuda.synchronize(dev)

    for _ in range(args.warmup):
        step()
    sync()
    return step, sync


def read_at_update(pynvml, handle, limit_s=0.5):
    """pynvml's energy counter (mJ) read right after it changes, and when (monotonic s)."""
    first = pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        v = pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
        if v != first:
            return v, time.monotonic()
    return first, time.monotonic()


def inner_agreement(args):
    import cnnergy
    import pynvml
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(args.gpu)
    monitor = cnnergy.Monitor(gpus=[args.gpu])
    step, sync = make_training(args)
    time.sleep(0.5)  # the GPU idles at the edges: an edge misplaced by a few ms costs ~nothing
    c0, t0 = read_at_update(pynvml, handle)  # right after a sensor update, then begin at once
    monitor.begin_window("run")
    epochs, steps = [], 0
    for e in range(args.epochs):
        with monitor.window("epoch") as w:
            for _ in range(args.steps):
                monitor.begin_window("step")
                step()
                monitor.end_window("step")  # unread: discarded (a step is below the sensor period)
                steps += 1
            sync()
        epochs.append(w.measurement)
    run = monitor.end_window("run")
    c1, t1 = read_at_update(pynvml, handle)  # the first update after the end (GPU idle by then)
    out = {"backend": cnnergy.backend_name, "gpu": args.gpu,
           "gpu_name": monitor.gpu_names.get(args.gpu), "steps": steps,
           "run": run.as_dict(), "epochs": [m.as_dict() for m in epochs],
           "pynvml": {"energy_j": (c1 - c0) / 1000.0, "t0_s": t0, "t1_s": t1},
           "sensor_period_ms": monitor.sensor_period_ms}
    with open(args.result, "w") as f:
        json.dump(out, f, indent=1)
    monitor.close()
    pynvml.nvmlShutdown()


def inner_overhead(args):
    import cnnergy
    monitor = cnnergy.Monitor(gpus=[args.gpu])
    monitor.stop()
    step, sync = make_training(args)
    pairs, begin_ns, end_ns = [], [], []
    for b in range(args.blocks):
        times = {}
        for on in ((False, True) if b % 2 == 0 else (True, False)):  # alternate the order
            if on:
                monitor.start()
            sync()
            t = time.perf_counter()
            if on:
                monitor.begin_window("block")
            for _ in range(args.steps):
                if on:
                    a = time.perf_counter_ns()
                    monitor.begin_window("step")
                    begin_ns.append(time.perf_counter_ns() - a)
                step()
                if on:
                    a = time.perf_counter_ns()
                    monitor.end_window("step")
                    end_ns.append(time.perf_counter_ns() - a)
            sync()
            block = monitor.end_window("block") if on else None
            times[on] = (time.perf_counter() - t) / args.steps
            if on:
                block.wait()  # outside the timed part: collected before the sampler stops
                monitor.stop()
        pairs.append(times)
    diffs = [p[True] / p[False] - 1.0 for p in pairs]
    q = lambda v, f: sorted(v)[min(len(v) - 1, int(f * len(v)))] / 1000.0  # noqa: E731 (us)
    out = {"backend": cnnergy.backend_name, "blocks": args.blocks, "steps_per_block": args.steps,
           "step_ms_off": statistics.median(p[False] for p in pairs) * 1e3,
           "step_ms_on": statistics.median(p[True] for p in pairs) * 1e3,
           "overhead_mean": statistics.mean(diffs),
           "overhead_stdev": statistics.stdev(diffs) if len(diffs) > 1 else 0.0,
           "overhead_median": statistics.median(diffs),
           "begin_us_median": q(begin_ns, 0.5), "begin_us_p99": q(begin_ns, 0.99),
           "end_us_median": q(end_ns, 0.5), "end_us_p99": q(end_ns, 0.99)}
    with open(args.result, "w") as f:
        json.dump(out, f, indent=1)
    monitor.close()


# --- the driver (outer process) -----------------------------------------------------------------
def counter_points(samples):
    """The monitor's counter samples (time, J) reduced to its changes, each placed midway between
    the last sample that still showed the old value and the first that shows the new one."""
    points = []
    for (t0, c0), (t1, c1) in zip(samples, samples[1:]):
        if c1 != c0:
            points.append(((t0 + t1) / 2.0, c1))
    return points


def counter_at(points, t):
    """The monitor's energy counter (J) at monotonic time t, linear between its change points."""
    for (t0, c0), (t1, c1) in zip(points, points[1:]):
        if t0 <= t <= t1:
            return c0 + (c1 - c0) * (t - t0) / (t1 - t0)
    raise RuntimeError("the monitor's samples do not cover t=%.3f" % t)


def pct(a, b):
    return 100.0 * (a - b) / b


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", default=os.path.join(HERE, "..", "build", "release"))
    p.add_argument("--out", default=".")
    p.add_argument("--gpu", type=int, default=0, help="NVML index (CUDA follows PCI order)")
    p.add_argument("--cuda-device", type=int, default=None)
    p.add_argument("--precision", choices=["fp32", "tf32", "bf16"], default="bf16")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--steps", type=int, default=200, help="steps per epoch")
    p.add_argument("--block-steps", type=int, default=100, help="steps per overhead block")
    p.add_argument("--warmup", type=int, default=15)
    p.add_argument("--blocks", type=int, default=8, help="paired overhead blocks")
    p.add_argument("--inner", choices=["agreement", "overhead"])
    p.add_argument("--result")
    p.add_argument("--skip-overhead", action="store_true")
    args = p.parse_args()
    if args.cuda_device is None:
        args.cuda_device = args.gpu
    if args.inner == "agreement":
        return inner_agreement(args)
    if args.inner == "overhead":
        return inner_overhead(args)

    build = os.path.abspath(args.build)
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=os.path.join(build, "python") + os.pathsep +
               os.environ.get("PYTHONPATH", ""), CUDA_DEVICE_ORDER="PCI_BUS_ID")
    common = ["--gpu", str(args.gpu), "--cuda-device", str(args.cuda_device), "--precision",
              args.precision, "--batch", str(args.batch), "--steps", str(args.steps),
              "--warmup", str(args.warmup)]
    me = os.path.abspath(__file__)
    mon_json, mon_jsonl = os.path.join(out, "monitor.json"), os.path.join(out, "monitor.jsonl")
    agree = os.path.join(out, "agreement.json")
    cmd = [os.path.join(build, "bin", "cnnergy"), "monitor", "--gpu", str(args.gpu), "--json",
           mon_json, "--jsonl", mon_jsonl, "--", sys.executable, me, "--inner",
           "agreement", "--result", agree, "--epochs", str(args.epochs)] + common
    print("running:", " ".join(cmd), flush=True)
    subprocess.run(cmd, env=env, check=True)
    with open(agree) as f:
        a = json.load(f)
    with open(mon_json) as f:
        mon = json.load(f)
    samples = []
    with open(mon_jsonl) as f:
        for line in f:
            j = json.loads(line)
            if j["type"] == "sample" and j["gpus"] and j["gpus"][0]["energy_counter_j"] is not None:
                samples.append((j["steady_time_s"], j["gpus"][0]["energy_counter_j"]))
    run = a["run"]
    win_j = run["energy_j"]
    points = counter_points(samples)
    mon_same_j = counter_at(points, run["end_s"]) - counter_at(points, run["begin_s"])
    mon_whole_j = mon["runs"][0]["gpu_energy_j"]  # cnnergy monitor's JSON: SI units, one entry per run
    epochs_j = sum(e["energy_j"] for e in a["epochs"])
    rows = [
        ("GPU", "%s (NVML %d), %s backend" % (a["gpu_name"], a["gpu"], a["backend"])),
        ("training", "%d steps, %.1f s, %.0f J, %.0f W average (run window, %s)"
         % (a["steps"], run["time_s"], win_j, run["avg_power_w"], run["source"])),
        ("window vs pynvml counter", "%.0f J vs %.0f J: %+.3f %% (target within 0.5 %%)"
         % (win_j, a["pynvml"]["energy_j"], pct(win_j, a["pynvml"]["energy_j"]))),
        ("window vs cnnergy monitor, same interval", "%.0f J vs %.0f J: %+.3f %% (target 1 %%)"
         % (win_j, mon_same_j, pct(win_j, mon_same_j))),
        ("cnnergy monitor, whole process", "%.0f J over %.1f s (start-up, model build and "
         "teardown included): window is %.2f %% of it"
         % (mon_whole_j, mon["runs"][0]["elapsed_s"], 100.0 * win_j / mon_whole_j)),
        ("sum of epoch windows vs run window", "%.0f J vs %.0f J: %+.3f %%"
         % (epochs_j, win_j, pct(epochs_j, win_j))),
        ("run window uncertainty", "+- %.1f J (%.3f %%)"
         % (run["uncertainty_j"], 100.0 * run["uncertainty_j"] / win_j)),
    ]
    summary = {"agreement": {"window_j": win_j, "pynvml_j": a["pynvml"]["energy_j"],
                             "monitor_same_interval_j": mon_same_j,
                             "monitor_whole_process_j": mon_whole_j, "epochs_sum_j": epochs_j,
                             "vs_pynvml_pct": pct(win_j, a["pynvml"]["energy_j"]),
                             "vs_monitor_pct": pct(win_j, mon_same_j)}}
    if not args.skip_overhead:
        ovh = os.path.join(out, "overhead.json")
        subprocess.run([sys.executable, me, "--inner", "overhead", "--result", ovh, "--blocks",
                        str(args.blocks)] + common + ["--steps", str(args.block_steps)], env=env,
                       check=True)
        with open(ovh) as f:
            o = json.load(f)
        summary["overhead"] = o
        rows += [
            ("step time, module off / on", "%.3f ms / %.3f ms (medians of %d paired blocks of %d)"
             % (o["step_ms_off"], o["step_ms_on"], o["blocks"], o["steps_per_block"])),
            ("overhead on step time", "%+.3f %% mean, %.3f %% stdev, %+.3f %% median (target "
             "< 0.5 %%)" % (100 * o["overhead_mean"], 100 * o["overhead_stdev"],
                            100 * o["overhead_median"])),
            ("begin_window / end_window", "%.2f / %.2f us median, %.2f / %.2f us p99 (target "
             "< 10 us)" % (o["begin_us_median"], o["end_us_median"], o["begin_us_p99"],
                           o["end_us_p99"])),
        ]
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    width = max(len(r[0]) for r in rows)
    print()
    for k, v in rows:
        print("  %-*s  %s" % (width, k, v))


if __name__ == "__main__":
    sys.exit(main())
