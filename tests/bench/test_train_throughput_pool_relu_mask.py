#!/usr/bin/env python3
"""bench_train_throughput --pool-relu-mask both on the CPU reference (VGG-16 at 32x32, batch 2): two
cells, the mask on (its five max pools take their convolution's ReLU mask and keep their argmax, and
the planned activation peak is lower) and off (none do), each saying so in its JSON and its lines.
Usage: test_train_throughput_pool_relu_mask.py BENCH_BINARY WORK_DIR"""
import json
import os
import subprocess
import sys


def main():
    bench, work = sys.argv[1:3]
    os.makedirs(work, exist_ok=True)
    out_json = os.path.join(work, "vgg16_mask.json")
    out = subprocess.run([bench, "--device", "cpu", "--models", "vgg16", "--image", "32", "--batches", "2",
                          "--precisions", "fp32", "--iters", "1", "--warmup", "1", "--pool-relu-mask", "both",
                          "--out", out_json], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    cells = {c["pool_relu_mask"]: c for c in json.load(open(out_json))["results"]}
    assert sorted(cells) == [False, True], cells
    on, off = cells[True], cells[False]
    assert on["status"] == "ok" and off["status"] == "ok", (on, off)
    assert on["relu_mask_pools"] == 5 and on["kept_pool_argmaxes"] == 5, on
    assert off["relu_mask_pools"] == 0 and off["kept_pool_argmaxes"] == 0, off
    assert on["live_peak_mib"] < off["live_peak_mib"], (on["live_peak_mib"], off["live_peak_mib"])
    assert "5 max pools apply their convolution's ReLU mask in backward" in out.stdout, out.stdout
    assert "leave the ReLU mask to their convolution (--pool-relu-mask off)" in out.stdout, out.stdout
    bad = subprocess.run([bench, "--device", "cpu", "--models", "vgg16", "--pool-relu-mask", "sometimes"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "pool-relu-mask" in bad.stderr, (bad.returncode, bad.stderr)
    print("ok: live peak", on["live_peak_mib"], "MiB against", off["live_peak_mib"])


if __name__ == "__main__":
    main()
