#!/usr/bin/env python3
"""A plain PyTorch training loop that lets cnnergy choose the GPU's power limit while it trains.

    python3 -m pip install .            # once, in the cnnergy repository
    python3 examples/pytorch_optimizer.py --dry-run          # says what it would do, changes nothing
    sudo python3 examples/pytorch_optimizer.py --objective energy --max-slowdown 0.10

The two lines that matter are marked "cnnergy". The optimizer profiles a few power limits on the
real training (each for enough steps to span several sensor updates, the default revisited in
every round), keeps the best one (or the default when nothing is told apart from it), holds it for
the rest of the run, and puts the default back at exit, on Ctrl-C, and after kill -9 through
`cnnergy restore`. The decision is remembered in the results database: the next run of the same
job only re-checks it. Changing a GPU setting needs root; without it the optimizer says so and
the training goes on, measured only.
"""
import argparse

import torch
import torchvision

import cnnergy


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--objective", default="energy", help="energy, time, edp, ed2p or eds:K")
    p.add_argument("--max-slowdown", type=float, default=0.10)
    p.add_argument("--clocks", action="store_true", help="tune locked SM clocks, not the power limit")
    p.add_argument("--dry-run", action="store_true", help="change nothing; say what it would do")
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--gpu", type=int, default=0)
    args = p.parse_args()

    device = torch.device("cuda", args.gpu)
    model = torchvision.models.resnet50().to(device).to(memory_format=torch.channels_last)
    sgd = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(args.batch, 3, 224, 224, device=device).to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (args.batch,), device=device)

    def train_step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        sgd.zero_grad(set_to_none=True)
        loss.backward()
        sgd.step()
        torch.cuda.synchronize()  # the step's work ends inside the step's window

    monitor = cnnergy.Monitor(gpus=[args.gpu])
    kind = cnnergy.ClockOptimizer if args.clocks else cnnergy.PowerLimitOptimizer
    opt = kind(monitor, objective=args.objective, max_slowdown=args.max_slowdown,  # cnnergy
               job="resnet50-example", model=model, batch_size=args.batch, precision="bf16",
               dry_run=args.dry_run)
    with opt:
        for step in range(args.steps):
            opt.on_step_begin(); train_step(); opt.on_step_end()  # cnnergy
            if opt.decision is not None and step % 500 == 0:
                print("step %d: %s" % (step, opt.messages[-1]))
    print("decision:", opt.decision)
    monitor.close()


if __name__ == "__main__":
    main()
