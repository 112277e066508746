#!/usr/bin/env python3
"""bench_train_throughput --workspace-within-activations on the CPU reference (LeNet-5, batch 2): both
gives two cells with the arena (the cap on and off, each saying so in its JSON), none with
--workspace-in-arena off but the one called off (no plan to cap by), and a value outside on|off|both is
refused. The CPU's convolutions search nothing, so the cap in effect is 0 there (none printed); the
GPU's is tested in test_train_cuda (SearchWorkspaceStaysWithinTheActivations).
Usage: test_train_throughput_workspace_cap.py BENCH_BINARY WORK_DIR"""
import json
import os
import subprocess
import sys


def cells(bench, work, name, *flags):
    out_json = os.path.join(work, name + ".json")
    out = subprocess.run([bench, "--device", "cpu", "--models", "lenet5", "--batches", "2", "--precisions", "fp32",
                          "--iters", "1", "--warmup", "1", "--out", out_json, *flags],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.load(open(out_json))["results"], out.stdout


def main():
    bench, work = sys.argv[1:3]
    os.makedirs(work, exist_ok=True)
    both, stdout = cells(bench, work, "both", "--workspace-within-activations", "both")
    assert sorted(c["workspace_within_activations"] for c in both) == [False, True], both
    assert all(c["status"] == "ok" and c["workspace_in_arena"] for c in both), both
    assert all(c["search_workspace_limit_mib"] == 0 for c in both), both
    assert "the searches considered workspaces up to" not in stdout, stdout
    no_arena, _ = cells(bench, work, "no_arena", "--workspace-within-activations", "both", "--workspace-in-arena", "off")
    assert [(c["workspace_in_arena"], c["workspace_within_activations"]) for c in no_arena] == [(False, False)], no_arena
    default, _ = cells(bench, work, "default")
    assert [c["workspace_within_activations"] for c in default] == [True], default
    bad = subprocess.run([bench, "--device", "cpu", "--models", "lenet5", "--workspace-within-activations", "maybe"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "workspace-within-activations" in bad.stderr, (bad.returncode, bad.stderr)
    print("ok:", len(both), "cells with both,", len(no_arena), "without the arena")


if __name__ == "__main__":
    main()
