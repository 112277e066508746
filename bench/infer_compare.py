#!/usr/bin/env python3
"""Joins `cnnergy infer --json` documents (ours) and bench/peer_infer.py's JSON (the peers, same call)
into markdown: per cell (device, model, precision, batch) our latency p50/p99, throughput, energy per
image and memory beside the BEST peer's in each column, with the ratio ours / best (latency and
mJ/img: lower is better, img/s: higher is better; memory against PyTorch eager, the issue's bar: our
serving peak (the allocator's peak from the timed requests on) and our process peak (the algorithm
search's scratch included), each against eager's max_memory_allocated after its warm-up).
Latency is the device-resident request on both sides (input already on the device, call + synchronize).
Usage: infer_compare.py --ours a.json [b.json ...] --peer p.json [q.json ...] [--detail] > table.md
--detail adds one table with every engine of every cell (failures with their error)."""
import argparse
import json
import sys


def kind(device_name):
    return "gpu" if any(k in (device_name or "") for k in ("NVIDIA", "Tesla", "GPU", "simulated")) else "cpu"


def rows_of(doc, engine):
    for r in doc.get("results", []):
        yield (kind(doc.get("device")), doc["model"], doc["precision"], r["batch"]), dict(r, engine=engine)


def read(path):
    """The JSON document, or None (said on stderr) for a file a step killed by its timeout left empty."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as exc:
        print(f"infer_compare: {path}: skipped ({exc})", file=sys.stderr)
        return None


def load(ours_paths, peer_paths):
    cells = {}
    for p in ours_paths:
        doc = read(p)
        for key, r in rows_of(doc, "cnnergy") if doc else []:
            cells.setdefault(key, {"ours": None, "peers": []})["ours"] = r
    for p in peer_paths:
        doc = read(p)
        for doc in doc["runs"] if doc else []:
            for key, r in rows_of(doc, doc["engine"]):
                cells.setdefault(key, {"ours": None, "peers": []})["peers"].append(r)
    return cells


def ok(r):
    return r is not None and "status" not in r and r.get("mode", "closed_loop") == "closed_loop"


def metric(r, name):
    if not ok(r):
        return None
    if name in ("p50_ms", "p90_ms", "p99_ms", "max_ms"):
        return r["device"][name]
    if name == "mj_per_image":
        j = r.get("joules_per_image")
        return None if j is None else j * 1e3
    if name == "serving_memory_mib":  # ours: the allocator's peak from the timed requests on; a peer's
        return r.get("serving_peak_memory_mib", r.get("peak_memory_mib"))  # max_memory_allocated
    return r.get(name)


COLUMNS = [  # (metric, header, lower is better)
    ("p50_ms", "p50 ms", True), ("p99_ms", "p99 ms", True), ("images_per_s", "img/s", False),
    ("mj_per_image", "mJ/img", True), ("serving_memory_mib", "serving MiB", True),
    ("peak_memory_mib", "process peak MiB", True)]
MEMORY = ("serving_memory_mib", "peak_memory_mib")
VS = {n: "eager" for n in MEMORY}  # the column's peer: the best, or PyTorch eager's for memory


def fmt(v, name):
    if v is None:
        return "–"
    if name == "images_per_s" or name in MEMORY:
        return f"{v:,.0f}" if v >= 100 else f"{v:.1f}"
    return f"{v:.3f}" if v < 10 else f"{v:.2f}"


def best_peer(peers, name, lower):
    """(value, engine) of the best measured peer in this column; memory: PyTorch eager's."""
    if name in MEMORY:
        peers = [p for p in peers if p["engine"] == "pytorch-eager"]
    vals = [(metric(p, name), p["engine"]) for p in peers if metric(p, name) is not None]
    if not vals:
        return None, None
    return (min if lower else max)(vals, key=lambda t: t[0])


def short(engine):
    return {"pytorch-eager": "eager", "pytorch-cuda-graph": "eager+graph", "torch.compile": "compile",
            "torch.compile reduce-overhead": "reduce-overhead", "torch.compile max-autotune": "max-autotune",
            "onnxruntime": "ORT"}.get(engine, engine)


def summary(cells):
    head = "| device | model | prec | batch | " + " | ".join(
        f"{h} ours / {VS.get(n, 'best peer')} (ratio)" for n, h, _ in COLUMNS) + " |"
    lines = [head, "|" + "---|" * (4 + len(COLUMNS))]
    for key in sorted(cells, key=lambda k: (k[0] != "gpu", k[1], k[2], k[3])):
        c = cells[key]
        if c["ours"] is None or not c["peers"]:
            continue
        parts = []
        for name, _, lower in COLUMNS:
            ours = metric(c["ours"], name)
            best, who = best_peer(c["peers"], name, lower)
            if ours is None and best is None:
                parts.append("–")
                continue
            ratio = f" ({ours / best:.2f}x)" if ours is not None and best else ""
            parts.append(f"{fmt(ours, name)} / {fmt(best, name)} {short(who) if who else ''}{ratio}")
        status = "" if ok(c["ours"]) else f" ({c['ours'].get('status', 'not run')[:60]})"
        lines.append(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]}{status} | " + " | ".join(parts) + " |")
    return "\n".join(lines)


def detail(cells):
    lines = ["| device | model | prec | batch | engine | p50 ms | p90 ms | p99 ms | max ms | img/s | mJ/img | "
             "peak MiB | note |", "|" + "---|" * 13]
    for key in sorted(cells, key=lambda k: (k[0] != "gpu", k[1], k[2], k[3])):
        c = cells[key]
        for r in ([c["ours"]] if c["ours"] else []) + c["peers"]:
            vals = [fmt(metric(r, n), n) for n in ("p50_ms", "p90_ms", "p99_ms", "max_ms", "images_per_s",
                                                  "mj_per_image", "peak_memory_mib")]
            note = r.get("status", "") or (f"compile {r['compile_s']:.0f} s" if "compile_s" in r else "")
            note = (note + (" " + r["note"] if r.get("note") else "")).replace("|", "/")[:160]
            lines.append(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | {r['engine']} | " + " | ".join(vals)
                         + f" | {note} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ours", nargs="+", default=[])
    ap.add_argument("--peer", nargs="+", default=[])
    ap.add_argument("--detail", action="store_true", help="also every engine of every cell")
    args = ap.parse_args()
    cells = load(args.ours, args.peer)
    if args.detail:
        print(detail(cells))
        print()
    print(summary(cells))


if __name__ == "__main__":
    main()
