#!/usr/bin/env python3
"""Per problem, direction and precision of convbench_engines.json.gz (cnnergy convbench --graph-engines
all): how many graph-API engine configurations run it, the fastest and slowest of them, where
graph_find's pick ranks among them, and the fastest legacy algorithm. Prints a markdown table.
Usage: python3 convbench_engines_summary.py (from this directory)."""
import gzip
import json
import os

doc = json.load(gzip.open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "convbench_engines.json.gz")))
groups = {}
for c in doc["cells"]:
    if c["status"] != "ok":
        continue
    groups.setdefault((c["problem"], c["direction"], c["precision"]), []).append(c)
print("| problem | direction | prec | engines that run | fastest engine ms | slowest engine ms | graph_find's pick ms (rank) "
      "| fastest legacy algorithm ms | own fastest ms |")
print("|---|---|---|---|---|---|---|---|---|")
for (problem, direction, prec), cells in groups.items():
    engines = sorted((c for c in cells if c["implementation"].startswith("graph:eng")), key=lambda c: c["time_ms_median"])
    legacy = sorted((c for c in cells if not c["implementation"].startswith(("graph", "own:"))),
                    key=lambda c: c["time_ms_median"])
    own = sorted((c for c in cells if c["implementation"].startswith("own:")), key=lambda c: c["time_ms_median"])
    pick = next((c for c in cells if c["implementation"] == "graph_find"), None)
    rank = "-"
    if pick and engines:
        names = [e["implementation"] for e in engines]
        rank = f"{pick['time_ms_median']:.3f} ({names.index(pick['ran']) + 1} of {len(names)})" if pick["ran"] in names \
            else f"{pick['time_ms_median']:.3f} (not listed)"
    fmt = lambda cs: f"{cs[0]['time_ms_median']:.3f} ({cs[0]['implementation']})" if cs else "-"
    print(f"| {problem.replace(',stride=1,pad=1', '')} | {direction} | {prec} | {len(engines)} | "
          f"{engines[0]['time_ms_median']:.3f} | {engines[-1]['time_ms_median']:.3f} | {rank} | {fmt(legacy)} | {fmt(own)} |"
          if engines else f"| {problem} | {direction} | {prec} | 0 | - | - | {rank} | {fmt(legacy)} | {fmt(own)} |")
