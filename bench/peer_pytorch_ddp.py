#!/usr/bin/env python3
"""PyTorch DDP peer for the multi-GPU benchmark: one process per GPU (NCCL), torchvision model,
synthetic data on the GPU, bf16 autocast + channels-last. Strong scaling (global batch split) and weak
scaling (per-GPU batch fixed). Prints images/s per configuration and writes JSON (--out)."""
import argparse
import json
import os
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torchvision


def worker(rank, world, args, queue):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    os.environ["NCCL_NVLS_ENABLE"] = "0"
    dist.init_process_group("nccl", rank=rank, world_size=world)
    torch.cuda.set_device(rank)
    torch.backends.cudnn.benchmark = True
    model = getattr(torchvision.models, args.model)(num_classes=1000).cuda().to(memory_format=torch.channels_last)
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[rank])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    b = args.per_gpu_batch
    x = torch.randn(b, 3, 224, 224, device="cuda").to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (b,), device="cuda")
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = loss_fn(ddp(x), y)
        loss.backward()
        opt.step()

    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(args.iters):
        step()
    torch.cuda.synchronize()
    dist.barrier()
    wall = time.perf_counter() - t0
    if rank == 0:
        queue.put({"model": args.model, "gpus": world, "per_gpu_batch": b, "global_batch": b * world,
                   "images_per_s": b * world * args.iters / wall, "iter_ms": wall * 1e3 / args.iters})
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--configs", default="1:256,2:128,2:256", help="gpus:per_gpu_batch list")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    results = []
    for i, cfg in enumerate(a.configs.split(",")):
        g, b = map(int, cfg.split(":"))
        a.per_gpu_batch = b
        os.environ["MASTER_PORT"] = str(29517 + i)
        ctx = mp.get_context("spawn")
        q = ctx.SimpleQueue()
        mp.spawn(worker, args=(g, a, q), nprocs=g, join=True)
        r = q.get()
        r["framework"] = "pytorch ddp " + torch.__version__
        results.append(r)
        print(f"{r['model']:10} gpus {g} per-gpu batch {b:4d} global {b * g:4d}: {r['images_per_s']:9.1f} img/s", flush=True)
        json.dump(results, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
