#!/usr/bin/env python3
"""Joins cnnergy's and PyTorch's training-throughput JSON files (same GPU, same call) into one
markdown table: images/s, ratio, per-phase times and peak memory; then ours against the best peer
mode of each cell, with the speed, energy and memory ratios and, given --targets SPEED,JOULES,MEMORY
(e.g. 1.15,0.85,1.0: at least 1.15x the speed, at most 0.85x the joules per image and at most the
peer's peak memory), how many of the three each cell meets. Usage:
compare_throughput.py --ours a.json [b.json ...] --peer p.json [q.json ...] [--targets 1.15,0.85,1.0] > table.md"""
import argparse
import json


def load(paths):
    """Cells by (model, batch, precision, variant). The peer's variant is "compiled" (torch.compile)
    or ""; ours names what differs from the eager default: the convolution policy where it is not
    find, the layout where it is not the precision's default, a replayed CUDA graph, ReLUs left
    unfused."""
    cells = {}
    for p in paths:
        for r in json.load(open(p))["results"]:
            cells[(r["model"], r["batch"], r["precision"], variant(r))] = r
    return cells


def variant(r):
    if "mode" in r:  # the peer with --modes: eager is "", a torch.compile mode by its name
        return "" if r["mode"] == "eager" else r["mode"]
    if "compiled" in r:
        return "compiled" if r["compiled"] else ""
    parts = []
    if r.get("algo", "find") not in ("find", "auto"):
        parts.append(r["algo"])
    default_layout = "nchw" if r["precision"] == "fp32" else "nhwc"  # the benchmark's auto layout
    if r.get("layout", default_layout) != default_layout:
        parts.append(r["layout"].upper())
    if r.get("cuda_graph"):
        parts.append("CUDA graph")
    if not r.get("fuse_relu", True):
        parts.append("ReLU unfused")
    return " + ".join(parts)


def phases(r):
    if r.get("cuda_graph"):
        return "(one graph)"
    return f"{r['forward_ms']:.2f}/{r['backward_ms']:.2f}/{r['update_ms']:.2f}"


def joules(r):
    e = r.get("energy") or {}
    return e.get("joules_per_image")


def fmt_joules(r):
    e = r.get("energy") or {}
    if e.get("joules_per_image") is None:
        return "-"
    return f"{e['joules_per_image']:.4f} [{e['joules_per_image_min']:.4f}, {e['joules_per_image_max']:.4f}]"


def parse_targets(text):
    """--targets SPEED,JOULES,MEMORY: three positive ratios (None where not given)."""
    if not text:
        return None
    parts = text.split(",")
    try:
        values = [float(x) for x in parts]
    except ValueError:
        values = []
    if len(values) != 3 or min(values) <= 0:
        raise SystemExit(f"--targets {text!r}: want three positive ratios SPEED,JOULES,MEMORY, e.g. 1.15,0.85,1.0")
    return values


def targets_met(speed, joules_ratio, memory, targets):
    """'2 of 3 (speed, memory)': the targets met; a ratio not measured (None) counts as not met."""
    names = ("speed", "energy", "memory")
    met = [speed is not None and speed >= targets[0],
           joules_ratio is not None and joules_ratio <= targets[1],
           memory is not None and memory <= targets[2]]
    listed = ", ".join(n for n, ok in zip(names, met) if ok)
    return f"{sum(met)} of 3" + (f" ({listed})" if listed and sum(met) < 3 else "")


def best_peer_table(ours, peer, targets=None):
    """Ours (the default variant) against the BEST peer mode of each cell, the comparison that counts:
    the fastest mode for speed, the most frugal mode (lowest joules per image) for energy, and the
    peak memory of the fastest mode."""
    rows = []
    best_ours = {}  # ours at its best too: the fastest variant measured of each cell (e.g. its CUDA graph)
    for key, o in ours.items():
        if o.get("status") == "ok" and (key[:3] not in best_ours or
                                        o["images_per_s"] > best_ours[key[:3]][1]["images_per_s"]):
            best_ours[key[:3]] = (key[3], o)
    for cell in sorted(best_ours, key=lambda k: (k[0], k[2], k[1])):
        ours_variant, o = best_ours[cell]
        key = cell + (ours_variant,)
        modes = {k[3] or "eager": p for k, p in peer.items() if k[:3] == key[:3]}
        ok = {m: p for m, p in modes.items() if p.get("status") == "ok"}
        failed = sorted(m for m, p in modes.items() if p.get("status") != "ok")
        if not ok:
            continue
        best_mode, best = max(ok.items(), key=lambda kv: kv[1]["images_per_s"])
        metered = {m: p for m, p in ok.items() if joules(p) is not None}
        frugal = min(metered.items(), key=lambda kv: joules(kv[1])) if metered else None
        rows.append((key, o, best_mode, best, frugal, failed))
    if not rows:
        return
    # The modes that ran, named: a table whose peer ran in one mode only must not read as "every mode".
    measured = ", ".join(sorted({k[3] or "eager" for k in peer}))
    print(f"\nAgainst the best PyTorch mode of each cell, of those measured in the same call ({measured}):\n")
    extra = " targets met |" if targets else ""
    print("| model | batch | precision | cnnergy img/s (variant) | best peer img/s | best mode | ratio | cnnergy J/image [range] "
          "| most frugal peer J/image [range] (mode) | J ratio | peak MiB ours / peer | memory ratio | modes failed |" + extra)
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|" + ("---|" if targets else ""))
    for key, o, best_mode, best, frugal, failed in rows:
        ratio_j = None
        if frugal and joules(o) is not None:
            peer_j = f"{fmt_joules(frugal[1])} ({frugal[0]})"
            ratio_j = joules(o) / joules(frugal[1])
        else:
            peer_j = "-"
        speed = o["images_per_s"] / best["images_per_s"]
        memory = o["peak_mem_mib"] / best["peak_mem_mib"] if best.get("peak_mem_mib") else None
        # The memory difference in MiB beside the ratio: a few MiB over reads 1.000 at three decimals.
        mem_text = f"{memory:.3f} ({o['peak_mem_mib'] - best['peak_mem_mib']:+.0f} MiB)" if memory else "-"
        met = f" {targets_met(speed, ratio_j, memory, targets)} |" if targets else ""
        print(f"| {key[0]} | {key[1]} | {key[2]} | {o['images_per_s']:.0f}{f' ({key[3]})' if key[3] else ''} | "
              f"{best['images_per_s']:.0f} | "
              f"{best_mode} | {speed:.2f} | {fmt_joules(o)} | {peer_j} | {f'{ratio_j:.2f}' if ratio_j is not None else '-'} | "
              f"{o['peak_mem_mib']:.0f} / {best['peak_mem_mib']:.0f} | {mem_text} | {', '.join(failed) or '-'} |{met}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ours", nargs="+", required=True)
    ap.add_argument("--peer", nargs="+", required=True)
    ap.add_argument("--targets", default="",
                    help="SPEED,JOULES,MEMORY ratios a cell should meet (e.g. 1.15,0.85,1.0): adds a 'targets met' column")
    a = ap.parse_args()
    targets = parse_targets(a.targets)
    ours, peer = load(a.ours), load(a.peer)
    print("| model | batch | precision | cnnergy img/s | PyTorch img/s | ratio | cnnergy fwd/bwd/upd ms | PyTorch fwd/bwd/upd ms | cnnergy peak MiB | PyTorch peak MiB |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for key in sorted(ours, key=lambda k: (k[0], k[2], k[1], k[3])):
        o = ours[key]
        p = peer.get((key[0], key[1], key[2], ""))  # always against eager PyTorch
        label = f"{key[2]} + {key[3]}" if key[3] else key[2]
        if o.get("status") != "ok":
            print(f"| {key[0]} | {key[1]} | {label} | {o.get('status')} | | | | | | |")
            continue
        if not p or p.get("status") != "ok":
            print(f"| {key[0]} | {key[1]} | {label} | {o['images_per_s']:.0f} | not measured | | "
                  f"{phases(o)} | | {o['peak_mem_mib']:.0f} | |")
            continue
        ratio = o["images_per_s"] / p["images_per_s"]
        print(f"| {key[0]} | {key[1]} | {label} | {o['images_per_s']:.0f} | {p['images_per_s']:.0f} | {ratio:.2f} | "
              f"{phases(o)} | {phases(p)} | {o['peak_mem_mib']:.0f} | {p['peak_mem_mib']:.0f} |")
    best_peer_table(ours, peer, targets)
    for key, p in sorted(peer.items()):
        if key[3] and p.get("status") == "ok":
            o = ours.get((key[0], key[1], key[2], ""))
            if o and o.get("status") == "ok":
                print(f"\ntorch.compile {key[0]} batch {key[1]} {key[2]}: {p['images_per_s']:.0f} img/s; cnnergy "
                      f"{o['images_per_s']:.0f} img/s (ratio {o['images_per_s'] / p['images_per_s']:.2f})")


if __name__ == "__main__":
    main()
