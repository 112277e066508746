#!/usr/bin/env python3
"""The framework callbacks and the optimizer on a real GPU, read-only (no setting is changed):
ResNet-50 trained in plain PyTorch, in PyTorch Lightning and in the Hugging Face Trainer, each with
cnnergy's callback (the optimizer attached in dry-run profile mode), under `cnnergy monitor
--jsonl`; then the optimizer's bookkeeping overhead on the step time.

Run on a lent GPU from the repository root, with a build tree carried there (ctypes backend):

    scripts/pack_device.sh    # here, then on the device (carrying .carry):
    source scripts/device_env.sh
    /opt/torch/.venv/bin/python bench/python_callbacks_agreement.py --build .carry --out $OUT

 1. agreement, per framework (plain, lightning, hf; a framework that is not installed is reported
    as missing, not skipped silently): every epoch's joules as the callback logged them against
    `cnnergy monitor`'s counter samples of the same process restricted to the epoch's interval
    (target: within 1 %). The callback drives cnnergy.PowerLimitOptimizer(dry_run="profile"): the
    whole profile runs with every visit at the default, so its verdict must be "not
    distinguishable from the default" (a false claim here would be a false saving).
 2. overhead: paired blocks of plain-PyTorch training steps with the optimizer's hooks and the
    callback core off and on (dry run, hold state after calibration, plus step windows every 50
    steps); the median step-time difference (target: <= 0.5 %).

Results: <framework>.json, monitor-<framework>.json(l), overhead.json, summary.json under --out.
--smoke-cpu runs the same plumbing with ResNet-18 on 32x32 images on the CPU against the fake NVML
(CNNERGY_NVML_LIBRARY=build/release/lib/libnvidia-ml-fake.so): a check of the script, not a
measurement.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from python_window_agreement import counter_at, counter_points, pct  # noqa: E402

FRAMEWORKS = ("plain", "lightning", "hf")


def make_model(args):
    import torch
    import torchvision
    torch.backends.cudnn.benchmark = True
    dev = torch.device("cpu") if args.smoke_cpu else torch.device("cuda", args.cuda_device)
    net = torchvision.models.resnet18 if args.smoke_cpu else torchvision.models.resnet50
    model = net(num_classes=1000).to(dev).to(memory_format=torch.channels_last)
    return torch, dev, model


def image_size(args):
    return 32 if args.smoke_cpu else 224


def make_step(args, torch, model, sgd, dev):
    """One training step on synthetic data (bf16 autocast on the GPU), waiting for the GPU."""
    x = torch.randn(args.batch, 3, image_size(args), image_size(args), device=dev)
    x = x.to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (args.batch,), device=dev)
    cuda = dev.type == "cuda"

    def step():
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=cuda):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        sgd.zero_grad(set_to_none=True)
        loss.backward()
        sgd.step()
        if cuda:
            torch.cuda.synchronize()
    return step


def optimizer_factory(args):
    import functools
    import cnnergy
    return functools.partial(cnnergy.PowerLimitOptimizer, objective="energy", max_slowdown=0.10,
                             dry_run="profile", remember=False, gpus=[args.gpu],
                             max_profile_steps=args.epochs * args.steps // 2)


def inner_plain(args):
    import cnnergy
    from cnnergy.integrations import EnergyLog
    torch, dev, model = make_model(args)
    sgd = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    step = make_step(args, torch, model, sgd, dev)
    monitor = cnnergy.Monitor(gpus=[args.gpu])
    log = EnergyLog(monitor=monitor, optimizer=optimizer_factory(args), log_every_n_steps=50)
    log.train_begin()
    opt = log.optimizer
    n = 0
    for epoch in range(args.epochs):
        log.epoch_begin(epoch)
        for _ in range(args.steps):
            log.step_begin()
            step()
            n += 1
            log.step_end(n)
        log.epoch_end(epoch)
    log.train_end()
    monitor.close()
    return {"epochs": log.epochs, "decision": opt.decision, "messages": opt.messages}


def synthetic(torch, args):
    n = args.batch * args.steps
    return torch.utils.data.TensorDataset(torch.randn(n, 3, image_size(args), image_size(args)),
                                          torch.randint(0, 1000, (n,)))


def inner_lightning(args):
    try:
        import lightning as L
    except ImportError:
        try:
            import pytorch_lightning as L
        except ImportError:
            raise SystemExit("lightning: not installed here (pip install lightning)")
    from cnnergy.integrations.lightning import EnergyCallback
    torch, dev, model = make_model(args)

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = model

        def training_step(self, batch, _):
            return torch.nn.functional.cross_entropy(self.net(batch[0]), batch[1])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01, momentum=0.9)

    cb = EnergyCallback(optimizer=optimizer_factory(args), log_every_n_steps=50, gpus=[args.gpu])
    trainer = L.Trainer(max_epochs=args.epochs,
                        accelerator="cpu" if args.smoke_cpu else "gpu",
                        devices=1 if args.smoke_cpu else [args.cuda_device],
                        precision="32-true" if args.smoke_cpu else "bf16-mixed", logger=False,
                        enable_checkpointing=False,
                        enable_progress_bar=False, callbacks=[cb])
    loader = torch.utils.data.DataLoader(synthetic(torch, args), batch_size=args.batch,
                                         num_workers=4, pin_memory=True)
    trainer.fit(Module(), loader)
    opt = cb.log.optimizer
    return {"epochs": cb.log.epochs, "decision": opt.decision, "messages": opt.messages}


def inner_hf(args):
    try:
        import transformers
    except ImportError:
        raise SystemExit("hf: transformers is not installed here (pip install transformers)")
    from cnnergy.integrations.transformers import EnergyCallback
    torch, dev, model = make_model(args)

    class Wrapped(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = model

        def forward(self, pixel_values, labels):
            logits = self.net(pixel_values)
            return {"loss": torch.nn.functional.cross_entropy(logits, labels), "logits": logits}

    class Data(torch.utils.data.Dataset):
        def __init__(self):
            self.d = synthetic(torch, args)

        def __len__(self):
            return len(self.d)

        def __getitem__(self, i):
            x, y = self.d[i]
            return {"pixel_values": x, "labels": y}

    extra = {"use_cpu": True} if args.smoke_cpu else {}  # the keyword of transformers >= 4.34
    targs = transformers.TrainingArguments(
        output_dir=os.path.join(args.result + ".hf"), num_train_epochs=args.epochs,
        per_device_train_batch_size=args.batch, bf16=not args.smoke_cpu, report_to=[],
        save_strategy="no", logging_steps=50, dataloader_num_workers=4, disable_tqdm=True,
        **extra)
    trainer = transformers.Trainer(model=Wrapped(), args=targs, train_dataset=Data())
    cb = EnergyCallback(optimizer=optimizer_factory(args), log_every_n_steps=50,
                        gpus=[args.gpu]).attach(trainer)
    holder = {}
    orig = cb.on_train_end

    def keep(a, state, control, **kw):
        holder["opt"] = cb.log.optimizer
        return orig(a, state, control, **kw)
    cb.on_train_end = keep
    trainer.train()
    opt = holder["opt"]
    logged = [h for h in trainer.state.log_history if "energy/epoch_j" in h]
    return {"epochs": cb.epochs, "decision": opt.decision, "messages": opt.messages,
            "logged_epochs": logged}


def inner_overhead(args):
    import cnnergy
    from cnnergy.integrations import EnergyLog
    torch, dev, model = make_model(args)
    sgd = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    step = make_step(args, torch, model, sgd, dev)
    for _ in range(args.warmup):
        step()
    monitor = cnnergy.Monitor(gpus=[args.gpu])
    log = EnergyLog(monitor=monitor, log_every_n_steps=50,
                    optimizer=cnnergy.PowerLimitOptimizer(monitor, "energy", dry_run=True,
                                                          remember=False, gpus=[args.gpu]))
    log.train_begin()
    for i in range(200):  # the optimizer calibrates and goes to hold (dry run)
        log.step_begin(); step(); log.step_end(i)
    off, on = [], []
    n = args.block_steps
    for b in range(args.blocks):
        for mode in (("off", "on") if b % 2 == 0 else ("on", "off")):
            t0 = time.perf_counter()
            for i in range(n):
                if mode == "on":
                    log.step_begin(); step(); log.step_end(i)
                else:
                    step()
            (on if mode == "on" else off).append((time.perf_counter() - t0) / n)
    log.train_end()
    monitor.close()
    diffs = [(a - b) / b for a, b in zip(on, off)]
    return {"step_ms_off": 1e3 * statistics.median(off), "step_ms_on": 1e3 * statistics.median(on),
            "overhead_median": statistics.median(diffs), "overhead_mean": statistics.mean(diffs),
            "overhead_stdev": statistics.stdev(diffs) if len(diffs) > 1 else 0.0,
            "blocks": args.blocks, "steps_per_block": n}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", default=os.path.join(HERE, "..", "build", "release"))
    p.add_argument("--out", default=".")
    p.add_argument("--gpu", type=int, default=0, help="NVML index (CUDA follows PCI order)")
    p.add_argument("--cuda-device", type=int, default=None)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--steps", type=int, default=150, help="steps per epoch")
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--blocks", type=int, default=8, help="paired overhead blocks")
    p.add_argument("--block-steps", type=int, default=100)
    p.add_argument("--frameworks", default=",".join(FRAMEWORKS))
    p.add_argument("--smoke-cpu", action="store_true",
                   help="ResNet-18 on 32x32 images on the CPU, the GPU from NVML (the fake one): "
                        "checks the script's plumbing, measures nothing real")
    p.add_argument("--inner", choices=FRAMEWORKS + ("overhead",))
    p.add_argument("--result")
    args = p.parse_args()
    if args.cuda_device is None:
        args.cuda_device = args.gpu
    if args.inner:
        fn = {"plain": inner_plain, "lightning": inner_lightning, "hf": inner_hf,
              "overhead": inner_overhead}[args.inner]
        with open(args.result, "w") as f:
            json.dump(fn(args), f, indent=1)
        return 0

    build, out = os.path.abspath(args.build), os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=os.path.join(build, "python") + os.pathsep +
               os.environ.get("PYTHONPATH", ""), CUDA_DEVICE_ORDER="PCI_BUS_ID")
    common = ["--gpu", str(args.gpu), "--cuda-device", str(args.cuda_device), "--batch",
              str(args.batch), "--epochs", str(args.epochs), "--steps", str(args.steps),
              "--warmup", str(args.warmup), "--blocks", str(args.blocks), "--block-steps",
              str(args.block_steps)] + (["--smoke-cpu"] if args.smoke_cpu else [])
    me = os.path.abspath(__file__)
    summary, rows, worst = {}, [], 0.0
    for fw in args.frameworks.split(","):
        res = os.path.join(out, fw + ".json")
        mon_json = os.path.join(out, "monitor-%s.json" % fw)
        mon_jsonl = os.path.join(out, "monitor-%s.jsonl" % fw)
        cmd = [os.path.join(build, "bin", "cnnergy"), "monitor", "--gpu", str(args.gpu), "--json",
               mon_json, "--jsonl", mon_jsonl, "--", sys.executable, me, "--inner", fw,
               "--result", res] + common
        print("running:", " ".join(cmd), flush=True)
        r = subprocess.run(cmd, env=env)
        if r.returncode != 0:
            rows.append((fw, "FAILED (exit %d; a missing framework says so above)" % r.returncode))
            summary[fw] = {"failed": r.returncode}
            continue
        with open(res) as f:
            a = json.load(f)
        samples = []
        with open(mon_jsonl) as f:
            for line in f:
                j = json.loads(line)
                if j["type"] == "sample" and j["gpus"] and j["gpus"][0]["energy_counter_j"] is not None:
                    samples.append((j["steady_time_s"], j["gpus"][0]["energy_counter_j"]))
        points = counter_points(samples)
        per_epoch = []
        for e in a["epochs"]:
            mon_j = counter_at(points, e["end_s"]) - counter_at(points, e["begin_s"])
            per_epoch.append({"epoch": e["epoch"], "callback_j": e["energy_j"], "monitor_j": mon_j,
                              "diff_pct": pct(e["energy_j"], mon_j)})
            worst = max(worst, abs(pct(e["energy_j"], mon_j)))
        summary[fw] = {"epochs": per_epoch, "decision": a["decision"]}
        rows.append((fw + " epochs vs cnnergy monitor", ", ".join(
            "%.0f/%.0f J %+.3f %%" % (x["callback_j"], x["monitor_j"], x["diff_pct"])
            for x in per_epoch) + " (target within 1 %)"))
        d = a["decision"] or {}
        rows.append((fw + " dry-run profile verdict", "%s (%s steps)"
                     % (d.get("verdict"), d.get("profile_steps"))))
    ovh = os.path.join(out, "overhead.json")
    subprocess.run([sys.executable, me, "--inner", "overhead", "--result", ovh] + common, env=env,
                   check=True)
    with open(ovh) as f:
        o = json.load(f)
    summary["overhead"] = o
    summary["worst_epoch_diff_pct"] = worst
    rows.append(("step time, bookkeeping off / on", "%.3f / %.3f ms; %+.3f %% median, %.3f %% "
                 "stdev over %d paired blocks (target <= 0.5 %%)"
                 % (o["step_ms_off"], o["step_ms_on"], 100 * o["overhead_median"],
                    100 * o["overhead_stdev"], o["blocks"])))
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    width = max(len(k) for k, _ in rows)
    print()
    for k, v in rows:
        print("  %-*s  %s" % (width, k, v))
    return 0


if __name__ == "__main__":
    sys.exit(main())
