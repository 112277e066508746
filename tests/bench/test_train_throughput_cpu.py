#!/usr/bin/env python3
"""bench_train_throughput on the CPU reference (LeNet-5, batch 8) with energy windows, then
bench/compare_throughput.py joining its JSON with a peer file: the benchmark's own plumbing (cells,
windows, JSON, the best-peer table's energy and memory columns), which the lent GPU runs for real.
Usage: test_train_throughput_cpu.py BENCH_BINARY COMPARE_SCRIPT WORK_DIR"""
import json
import os
import subprocess
import sys


def main():
    bench, compare, work = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    ours = os.path.join(work, "ours.json")
    out = subprocess.run([bench, "--device", "cpu", "--models", "lenet5", "--batches", "8", "--precisions", "fp32",
                          "--iters", "3", "--warmup", "1", "--windows", "3", "--window-s", "0.2", "--out", ours],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    cells = json.load(open(ours))["results"]
    assert len(cells) == 1, cells
    c = cells[0]
    assert c["status"] == "ok" and c["device"] == "cpu", c
    assert c["images_per_s"] > 0 and c["peak_mem_mib"] > 0, c
    # What the step holds, by owner, adds up to what the backend says it holds (other: the rest).
    owners = ("activation_mib", "parameter_mib", "layer_state_mib", "conv_workspace_mib", "momentum_mib",
              "input_mib", "input_copy_mib", "other_mib")
    assert abs(sum(c[k] for k in owners) - c["in_use_mib"]) < 0.01, c  # the JSON keeps 6 digits
    assert 0 < c["momentum_mib"] <= c["parameter_mib"] and c["input_mib"] > 0 and c["other_mib"] >= 0, c
    assert "optimizer momentum" in out.stdout, out.stdout
    e = c["energy"]
    assert e["windows"] == 3 and e["window_s"] == 0.2, e
    assert e["iterations_per_window"] >= 3, e
    # The windows' own rate (their iteration count is calibrated to --window-s on the first; no bound
    # against the timed iterations' rate, which a loaded machine moves by several times).
    assert 0 < e["images_per_s"] < float("inf"), e
    if e["joules_per_image"] is None:  # no RAPL here: said in the table, no number invented
        assert "energy: not measured" in out.stdout, out.stdout
    else:
        assert 0 < e["joules_per_image_min"] <= e["joules_per_image"] <= e["joules_per_image_max"], e
        assert "J/image" in out.stdout, out.stdout

    # The join: energy against the most frugal peer mode, speed against the fastest.
    joules = e["joules_per_image"] if e["joules_per_image"] is not None else 0.5
    c["energy"].update(joules_per_image=joules, joules_per_image_min=joules, joules_per_image_max=joules)
    json.dump({"framework": "cnnergy", "results": [c]}, open(ours, "w"))
    fast = {"model": "lenet5", "batch": 8, "precision": "fp32", "mode": "reduce-overhead", "status": "ok",
            "images_per_s": c["images_per_s"] * 2, "forward_ms": 1, "backward_ms": 1, "update_ms": 1,
            "peak_mem_mib": c["peak_mem_mib"] * 2, "energy": {"joules_per_image": joules * 4, "joules_per_image_min": joules * 3,
                                            "joules_per_image_max": joules * 5}}
    frugal = dict(fast, mode="eager", images_per_s=c["images_per_s"] / 2,
                  energy={"joules_per_image": joules * 2, "joules_per_image_min": joules * 2,
                          "joules_per_image_max": joules * 2})
    peer = os.path.join(work, "peer.json")
    json.dump({"device": "cpu", "results": [fast, frugal]}, open(peer, "w"))
    table = subprocess.run([sys.executable, compare, "--ours", ours, "--peer", peer, "--targets", "1.15,0.85,1.0"],
                           capture_output=True, text=True, timeout=60)
    assert table.returncode == 0, table.stderr
    # The header names the modes that ran (not "every mode").
    assert "of those measured in the same call (eager, reduce-overhead)" in table.stdout, table.stdout
    row = [line for line in table.stdout.splitlines() if line.startswith("| lenet5") and "reduce-overhead" in line]
    assert len(row) == 1, table.stdout
    cols = [x.strip() for x in row[0].strip("|").split("|")]
    assert cols[6] == "0.50", cols  # speed against the fastest mode (2x ours)
    assert cols[8].endswith("(eager)") and cols[9] == "0.50", cols  # energy against the most frugal (2x ours)
    assert cols[10] == f"{c['peak_mem_mib']:.0f} / {c['peak_mem_mib'] * 2:.0f}", cols
    assert cols[11].startswith("0.500 (-"), cols  # memory against the fastest mode's peak (2x ours)
    # --targets 1.15,0.85,1.0: speed 0.50 misses, energy 0.50 and memory 0.50 meet.
    assert cols[13] == "2 of 3 (energy, memory)", cols
    bad = subprocess.run([sys.executable, compare, "--ours", ours, "--peer", peer, "--targets", "1.15,x"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "three positive ratios" in bad.stderr, (bad.returncode, bad.stderr)
    print("ok:", e)


if __name__ == "__main__":
    main()
