#!/usr/bin/env python3
"""Checks bench/peer_zoo.py's PyTorch models against cnnergy's zoo (`cnnergy model-info --format json`):
per model, the input shape and class count, the trained-parameter count (batch-norm running statistics
excluded on both sides), the output shape and parameter count of every convolution and fully connected
layer (as multisets: branch order may differ), and one forward pass at batch 1 giving (1, classes).
Exits 1 on a mismatch, 77 (ctest SKIP_RETURN_CODE) when torch/torchvision are absent.

usage: peer_zoo_check.py CNNERGY_BIN [model ...]     (run with Debian's /usr/bin/python3)
"""
import collections
import json
import os
import subprocess
import sys

SKIP = 77


def ours(cnnergy, name):
    doc = json.loads(subprocess.run([cnnergy, "model-info", name, "--format", "json"], check=True,
                                    capture_output=True, text=True).stdout)
    layers = collections.Counter((l["type"], tuple(l["output_shape"][1:]), l["batch"]["parameters"])
                                 for l in doc["layers"] if l["type"] in ("conv", "fc"))
    return tuple(doc["input"]), doc["classes"], doc["parameters"], layers


def theirs(torch, model, chw):
    """Forward at batch 1 (train mode, as the peer trains), recording conv/fc outputs with hooks."""
    layers = collections.Counter()

    def hook(module, _inputs, output):
        kind = "conv" if isinstance(module, torch.nn.Conv2d) else "fc"
        layers[(kind, tuple(output.shape[1:]), sum(p.numel() for p in module.parameters()))] += 1

    handles = [m.register_forward_hook(hook) for m in model.modules()
               if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))]
    model.train()
    with torch.no_grad():
        out = model(torch.randn(1, *chw))
    for h in handles:
        h.remove()
    return out, layers


def main():
    try:
        import torch
        import torchvision  # noqa: F401 (peer_zoo needs it)
    except ImportError as e:
        print(f"SKIP: {e} (install python3-torch and python3-torchvision)")
        return SKIP
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import peer_zoo

    torch.manual_seed(0)
    torch.set_num_threads(min(2, torch.get_num_threads()))
    cnnergy = sys.argv[1] if len(sys.argv) > 1 else "build/release/bin/cnnergy"
    names = sys.argv[2:] or list(peer_zoo.ZOO)
    failures = 0
    print(f"{'model':13} {'input':10} {'classes':>7} {'ours':>12} {'PyTorch':>12}  verdict")
    for name in names:
        chw, classes, params, layers = ours(cnnergy, name)
        try:
            model, t_chw, t_classes = peer_zoo.build(name)
            t_params = sum(p.numel() for p in model.parameters() if p.requires_grad)
            out, t_layers = theirs(torch, model, t_chw)
        except Exception as exc:  # a model that fails to build or run is a mismatch; the others go on
            failures += 1
            print(f"{name:13} {'x'.join(map(str, chw)):10} {classes:7d} {params:12,d} {'-':>12}  MISMATCH: {exc!r}")
            continue
        problems = []
        if (tuple(t_chw), t_classes) != (chw, classes):
            problems.append(f"input/classes {t_chw}/{t_classes} vs ours {chw}/{classes}")
        if t_params != params:
            problems.append(f"parameters {t_params} vs ours {params}")
        if tuple(out.shape) != (1, classes):
            problems.append(f"output shape {tuple(out.shape)} vs (1, {classes})")
        if t_layers != layers:
            only_theirs, only_ours = t_layers - layers, layers - t_layers
            problems.append(f"conv/fc layers differ: PyTorch only {dict(only_theirs)}; ours only {dict(only_ours)}")
        verdict = "ok" if not problems else "MISMATCH: " + "; ".join(problems)
        failures += bool(problems)
        shape = "x".join(map(str, chw))
        print(f"{name:13} {shape:10} {classes:7d} {params:12,d} {t_params:12,d}  {verdict}", flush=True)
        del model, out
    print(f"{len(names) - failures} of {len(names)} models agree")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
