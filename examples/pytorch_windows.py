#!/usr/bin/env python3
"""A PyTorch training loop measured with cnnergy windows: energy per epoch, and per phase (forward,
backward, optimizer step) measured honestly.

    PYTHONPATH=build/release/python python3 examples/pytorch_windows.py --epochs 3

Per epoch: one window around each epoch (seconds long: many sensor updates, trustworthy).
Per phase: a training step's phases last milliseconds, far below the GPU power sensor's update
period (~100 ms), so a window around one forward pass rests on one or two sensor updates and is
flagged `below_sensor_period`. The example shows both: the naive per-step phase windows (and how
many were flagged), then the honest figure: each phase repeated back to back in one window of
--phase-seconds seconds, divided by the repetitions (forward: N forward passes; backward: N backward
passes over one retained graph; step: N optimizer steps on a saved copy of the state, restored
afterwards). The three phases should add up to about the energy of one training step.

The same loop from outside, for the whole process (no code change):

    cnnergy monitor --gpus 0 -- python3 examples/pytorch_windows.py
    python3 -m cnnergy.monitor --gpus 0 -- python3 examples/pytorch_windows.py
    cnnergy monitor --gpus 0 --prometheus-port 9400 --jsonl run.jsonl -- python3 ...

(the first two report the same figures; the third also serves live metrics for Prometheus at
http://127.0.0.1:9400/metrics and streams samples and windows as JSON lines).
This example never changes a GPU setting; to train under a power limit, wrap the loop in
`with cnnergy.power_limit(250, gpu=0):` (needs root; restored on exit, errors and signals).
"""
import argparse
import copy
import math
import time

import torch
import torchvision

import cnnergy


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="resnet18", help="a torchvision model name")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--steps", type=int, default=100, help="steps per epoch (synthetic data)")
    p.add_argument("--gpu", type=int, default=0, help="CUDA device, measured as NVML index too")
    p.add_argument("--phase-seconds", type=float, default=2.0,
                   help="length of each repeated-phase window (>= 10 sensor periods)")
    args = p.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("this example trains on a CUDA GPU; none is visible")

    dev = torch.device("cuda", args.gpu)
    torch.backends.cudnn.benchmark = True
    model = getattr(torchvision.models, args.model)(num_classes=1000).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    x = torch.randn(args.batch, 3, 224, 224, device=dev)
    y = torch.randint(0, 1000, (args.batch,), device=dev)
    sync = lambda: torch.cuda.synchronize(dev)  # noqa: E731

    monitor = cnnergy.Monitor(gpus=[args.gpu])
    print("cnnergy %s backend; GPU %d %s; sensor updates every %.0f ms"
          % (cnnergy.backend_name, args.gpu, monitor.gpu_names[args.gpu],
             monitor.sensor_period_ms))

    # --- training, a window per epoch and (naively) per phase of every step ----------------------
    naive = {"forward": [], "backward": [], "step": []}
    epochs = []
    for _ in range(2):  # warm-up (cuDNN autotuning) outside the windows
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        opt.step()
    sync()
    for epoch in range(args.epochs):
        with monitor.window("epoch") as ew:
            for _ in range(args.steps):
                opt.zero_grad(set_to_none=True)
                # A phase window needs the GPU to have finished the phase: synchronize at each edge.
                # (This costs throughput; measure phases in a separate run, as below, in practice.)
                with monitor.window("forward", on_result=naive["forward"].append):
                    loss = loss_fn(model(x), y)
                    sync()
                with monitor.window("backward", on_result=naive["backward"].append):
                    loss.backward()
                    sync()
                with monitor.window("step", on_result=naive["step"].append):
                    opt.step()
                    sync()
        m = ew.measurement
        epochs.append(m)
        print("epoch %d: %.2f s, %.1f J, %.1f W average, %.1f W peak (%s)"
              % (epoch, m.time_s, m.energy_j, m.avg_power_w, m.peak_power_w or math.nan,
                 m.source))
    steps = args.epochs * args.steps
    step_j = sum(m.energy_j for m in epochs) / steps
    print("per training step: %.3f J over %.2f ms" % (step_j, 1e3 * sum(m.time_s for m in epochs)
                                                      / steps))
    for phase, ms in naive.items():
        short = sum(1 for m in ms if m.below_sensor_period)
        print("naive %-8s %6.3f J per step, %5.2f ms; %d of %d windows below the sensor period"
              % (phase, sum(m.energy_j for m in ms) / len(ms),
                 1e3 * sum(m.time_s for m in ms) / len(ms), short, len(ms)))

    # --- honest per-phase figures: repeat each phase in one long window --------------------------
    def repeated(name, body, setup=None):
        """Runs body() back to back for ~phase_seconds in one window; returns J and ms per call."""
        if setup:
            setup()
        sync()
        t = time.perf_counter()
        body()
        sync()
        n = max(3, int(args.phase_seconds / max(time.perf_counter() - t, 1e-4)))
        with monitor.window(name) as w:
            for _ in range(n):
                body()
            sync()
        m = w.measurement
        flag = " (below the sensor period!)" if m.below_sensor_period else ""
        print("repeated %-8s %6.3f J +- %.3f J per call, %5.2f ms, %d calls%s"
              % (name, m.energy_j / n, m.uncertainty_j / n, 1e3 * m.time_s / n, n, flag))
        return m.energy_j / n

    state = {"loss": None}

    def forward():
        state["loss"] = loss_fn(model(x), y)

    def retain():
        opt.zero_grad(set_to_none=True)
        state["loss"] = loss_fn(model(x), y)

    def backward():
        state["loss"].backward(retain_graph=True)

    saved_model, saved_opt = copy.deepcopy(model.state_dict()), copy.deepcopy(opt.state_dict())
    total = repeated("forward", forward)
    total += repeated("backward", backward, setup=retain)
    total += repeated("step", opt.step)
    model.load_state_dict(saved_model)
    opt.load_state_dict(saved_opt)
    print("phases added up: %.3f J vs %.3f J per training step (%+.1f %%)"
          % (total, step_j, 100.0 * (total - step_j) / step_j))
    monitor.close()


if __name__ == "__main__":
    main()
