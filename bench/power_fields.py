#!/usr/bin/env python3
"""Instant power, the driver's 1 s-average power and the energy counter on short windows.

Reads a `cnnergy monitor --jsonl FILE` stream (sampled fast, e.g. --interval-ms 20, while a load runs)
and, for each window length, integrates each power field (trapezoid) over windows that start and end
where the energy counter changed (so the counter's difference is exact to one sampling interval),
then prints how far each field's energy is from the counter's: mean, spread and worst, in %, over the
windows taken under load (utilisation >= --min-util) and over those that include the load's start.

  python3 bench/power_fields.py run.jsonl --windows-s 0.25,0.5,1,2
"""
import argparse
import json
import statistics
import sys


def load(path, gpu):
    rows = []
    with open(path) as f:
        for line in f:
            try:
                j = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut short when the monitor ended
            if j.get("type") != "sample":
                continue
            for g in j.get("gpus", []):
                if g.get("gpu") != gpu:
                    continue
                rows.append((j["steady_time_s"], g.get("energy_counter_j"), g.get("power_w"),
                             g.get("power_average_w"), g.get("utilization_gpu_percent"), g.get("power_field")))
    return rows


def integrate(rows, i, k, col):
    e = 0.0
    for a, b in zip(rows[i:k], rows[i + 1:k + 1]):
        if a[col] is None or b[col] is None:
            return None
        e += 0.5 * (a[col] + b[col]) * (b[0] - a[0])
    return e


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("jsonl")
    ap.add_argument("--gpu", type=int, default=0, help="NVML index (default 0)")
    ap.add_argument("--windows-s", default="0.25,0.5,1,2,5")
    ap.add_argument("--min-util", type=float, default=90, help="a window is 'under load' when every sample is at least this busy")
    a = ap.parse_args()
    rows = load(a.jsonl, a.gpu)
    if len(rows) < 10 or all(r[1] is None for r in rows):
        sys.exit("power_fields.py: %s has too few samples with an energy counter for GPU %d" % (a.jsonl, a.gpu))
    changes = [i for i in range(1, len(rows)) if rows[i][1] is not None and rows[i - 1][1] is not None and rows[i][1] != rows[i - 1][1]]
    fields = sorted({r[5] for r in rows if r[5]})
    print("GPU %d: %d samples over %.1f s, %d counter updates (every %.0f ms); power_w is the %s field"
          % (a.gpu, len(rows), rows[-1][0] - rows[0][0], len(changes),
             1e3 * (rows[changes[-1]][0] - rows[changes[0]][0]) / max(1, len(changes) - 1) if len(changes) > 1 else 0,
             "/".join(fields) or "unknown"))
    busy_from = next((i for i, r in enumerate(rows) if (r[4] or 0) >= a.min_util), None)
    print()
    print("| window | kind | windows | instant vs counter: mean | sd | worst | 1 s average vs counter: mean | sd | worst |")
    print("|---|---|---|---|---|---|---|---|---|")
    for w in [float(x) for x in a.windows_s.split(",") if x]:
        for kind in ("under load", "load start"):
            inst, avg = [], []
            for ci, i in enumerate(changes):
                k = next((c for c in changes[ci + 1:] if rows[c][0] - rows[i][0] >= w), None)
                if k is None:
                    break
                busy = all((r[4] or 0) >= a.min_util for r in rows[i:k + 1])
                starts = busy_from is not None and i <= busy_from < k
                if (kind == "under load" and not busy) or (kind == "load start" and not starts):
                    continue
                counter = rows[k][1] - rows[i][1]
                if counter <= 0:
                    continue
                for col, out in ((2, inst), (3, avg)):
                    e = integrate(rows, i, k, col)
                    if e is not None:
                        out.append(100 * (e - counter) / counter)
            def cells(v):
                if not v:
                    return "- | - | -"
                worst = max(v, key=abs)
                return "%+.1f %% | %.1f %% | %+.1f %%" % (statistics.mean(v), statistics.pstdev(v), worst)
            n = max(len(inst), len(avg))
            if n:
                print("| %.2f s | %s | %d | %s | %s |" % (w, kind, n, cells(inst), cells(avg)))


if __name__ == "__main__":
    main()
