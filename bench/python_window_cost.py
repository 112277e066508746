#!/usr/bin/env python3
"""Where begin_window/end_window spend their time right after a PyTorch training step.

Run on a lent GPU with the build tree carried there (ctypes backend):
    /opt/torch/.venv/bin/python bench/python_window_cost.py --build .carry [--steps 200]
Times, right after each step of a ResNet-50 training (synthetic data, bf16 autocast), on the
training thread: the public begin_window and end_window (alternating which one comes right after
the step, since the call after a step runs on cold caches), and as a floor a trivial Python
statement at the same point (two time.monotonic_ns() calls); with Python's cyclic garbage collector
on and off. Prints medians and p90 in microseconds and writes JSON (--out). Read-only on the GPU.
"""
import argparse
import gc
import json
import os
import statistics
import sys
import time


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build", default="build/release")
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--out", default="window_cost.json")
    a = p.parse_args()
    sys.path.insert(0, os.path.join(a.build, "python"))
    import torch
    import torchvision
    import cnnergy
    dev = torch.device("cuda")
    model = torchvision.models.resnet50().to(dev).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(a.batch, 3, 224, 224, device=dev).to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (a.batch,), device=dev)

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    for _ in range(10):
        step()
    torch.cuda.synchronize()
    m = cnnergy.Monitor(gpus=[0])
    pc = time.perf_counter_ns
    results = {"backend": cnnergy.backend_name}
    for gc_on in (True, False):
        if not gc_on:
            gc.disable()
        parts = {k: [] for k in ("floor", "begin_window", "end_window")}
        for i in range(a.steps):
            step()
            if i % 2 == 0:  # the floor right after the step, then a window around nothing
                t = pc()
                time.monotonic_ns()
                parts["floor"].append(pc() - t)
                t = pc()
                m.begin_window("step")
                parts["begin_window"].append(pc() - t)
                m.end_window("step")
            else:  # a window around the step: its end right after the step
                t = pc()
                m.end_window("around") if i > 1 else None
                if i > 1:
                    parts["end_window"].append(pc() - t)
                m.begin_window("around")
        m.end_window("around")
        gc.enable()
        key = "gc_on" if gc_on else "gc_off"
        results[key] = {}
        for k, v in parts.items():
            v = sorted(v)
            results[key][k] = {"median_us": statistics.median(v) / 1e3,
                               "p90_us": v[int(0.9 * len(v))] / 1e3}
            print("%-7s %-13s median %7.2f us  p90 %7.2f us" % (key, k, statistics.median(v) / 1e3,
                                                             v[int(0.9 * len(v))] / 1e3))
    m.close()
    with open(a.out, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
