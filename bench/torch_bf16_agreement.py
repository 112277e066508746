#!/usr/bin/env python3
"""PyTorch's own bf16 top-1 agreement with its fp32 logits, on the models and random inputs that
bench/onnx_gpu_check.py uses (random weights, batch-norm statistics calibrated the same way): the
peer's figure beside ours, to read a bf16 agreement below 99 % on random-weight models. Read-only on
the GPU. Usage: /opt/torch/.venv/bin/python bench/torch_bf16_agreement.py [--models a,b] [--inputs N]
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from onnx_gpu_check import calibrate_batch_norm  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="resnet50,mobilenet_v3_large,shufflenet_v2_x1_0,efficientnet_b0")
    ap.add_argument("--inputs", type=int, default=500)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default="torch_bf16_agreement.json")
    a = ap.parse_args()
    import torch
    import torchvision
    out = []
    for name in a.models.split(","):
        torch.manual_seed(a.seed)
        model = getattr(torchvision.models, name)(num_classes=1000)
        calibrate_batch_norm(torch, model, 224)
        model = model.eval().cuda()
        x = torch.randn(a.inputs, 3, 224, 224)
        with torch.no_grad():
            ref = torch.cat([model(b.cuda()).float().cpu() for b in x.split(100)])
            with torch.autocast("cuda", dtype=torch.bfloat16):
                low = torch.cat([model(b.cuda()).float().cpu() for b in x.split(100)])
            model_bf16 = model.to(torch.bfloat16)
            pure = torch.cat([model_bf16(b.cuda().to(torch.bfloat16)).float().cpu()
                              for b in x.split(100)])
        agree = lambda y: float((y.argmax(1) == ref.argmax(1)).float().mean())  # noqa: E731
        row = {"model": name, "inputs": a.inputs, "autocast_bf16_top1_agreement": agree(low),
               "bf16_weights_top1_agreement": agree(pure)}
        print("%-20s PyTorch bf16 top-1 agreement with its fp32: autocast %.2f %%, bf16 weights %.2f %%"
              % (name, 100 * row["autocast_bf16_top1_agreement"], 100 * row["bf16_weights_top1_agreement"]))
        out.append(row)
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
