#!/usr/bin/env python3
"""Tables of NOTES.md from this folder's raw files (python3 tables.py > tables.md): the Nsight Compute
cross-check of convbench's in-process counters, issue 19's targets on ResNet-50's 3x3 convolutions,
the counters of the 56x56 layer, and energy per implementation on Li et al. 2016's Table I."""
import csv, gzip, json, statistics
from collections import defaultdict

def load(name):
    return json.load(gzip.open(name))

def xcheck():
    print("## In-process counters (CUPTI range profiler) against Nsight Compute, same cell\n")
    print("| cell | metric | convbench (one call) | ncu (median of the kernel's launches) | ratio |")
    print("|---|---|---|---|---|")
    for tag, kernel in (("implicit_gemm", "implicit_convolve_sgemm"), ("own_direct", "direct_forward")):
        ours = load(f"call1_xcheck_{tag}_ours.json.gz")["cells"][0]["kernels"]["counter_values"]
        rows = list(csv.reader(open(f"call1_xcheck_{tag}_ncu.csv")))
        head = next(i for i, r in enumerate(rows) if r and r[0] == "ID")
        h = rows[head]
        ki, mi, vi = h.index("Kernel Name"), h.index("Metric Name"), h.index("Metric Value")
        ncu = defaultdict(list)
        for r in rows[head + 1:]:
            if kernel in r[ki]:
                ncu[r[mi]].append(float(r[vi].replace(",", "")))
        for m in sorted(ncu):
            n = statistics.median(ncu[m])
            print(f"| {tag} fwd fp32 | `{m}` | {ours[m]:,.4g} | {n:,.4g} ({len(ncu[m])} launches) | {ours[m] / n:.4f} |")
    print()

def targets(name, title):
    print(f"## {title}\n")
    print("| problem (n=128, 3x3, pad 1) | direction | prec | fastest cuDNN (name) ms | own:implicit_gemm ms (fastest / ours) | own:im2col_gemm ms | cuDNN `gemm` ms | gemm / im2col_gemm |")
    print("|---|---|---|---|---|---|---|---|")
    g = defaultdict(dict)
    for c in load(name)["cells"]:
        if c["status"] == "ok":
            g[(c["problem"], c["direction"], c["precision"])][c["implementation"]] = c["time_ms_median"]
    for (p, d, pr), m in sorted(g.items()):
        cud = {k: v for k, v in m.items() if not k.startswith("own:")}
        best = min(cud, key=cud.get)
        ig, im, gm = m.get("own:implicit_gemm"), m.get("own:im2col_gemm"), m.get("gemm")
        short = p.replace("n=128,", "").replace(",r=3,s=3", "").replace(",pad=1", "")
        print(f"| {short} | {d} | {pr} | {cud[best]:.3f} ({best}) | "
              + (f"{ig:.3f} ({cud[best] / ig:.3f}) | " if ig else "- | ")
              + (f"{im:.3f} | " if im else "- | ") + (f"{gm:.3f} | " if gm else "- | ")
              + (f"{gm / im:.2f} |" if im and gm else "- |"))
    print()

def counters(name):
    print("## Counters of ResNet-50's 56x56 3x3 layer, batch 128, NHWC (`--metrics full`)\n")
    print("| implementation | direction | prec | ms | TFLOP/s | occupancy % | IPC | warp eff. % | gld sectors/req | gst sectors/req | shared eff. % | DRAM MiB read/written | tensor pipe % | top kernel: share, regs, smem |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for c in load(name)["cells"]:
        if c["status"] != "ok" or not c.get("kernels"):
            continue
        k, d = c["kernels"], c["kernels"].get("derived", {})
        f = lambda n, fmt="%.1f": (fmt % d[n]["value"]) if n in d else "-"
        top = k["list"][0] if k["list"] else None
        tk = f'`{top["name"][:34]}`: {100 * top["share"]:.0f} %, {top["registers_per_thread"]}, {top["shared_bytes_per_block"] // 1024} KiB' if top else "-"
        dram = f'{d["dram_read_bytes"]["value"] / 2**20:.0f} / {d["dram_write_bytes"]["value"] / 2**20:.0f}' if "dram_read_bytes" in d else "-"
        print(f'| {c["implementation"]} | {c["direction"]} | {c["precision"]} | {c["time_ms_median"]:.3f} | {c["tflops"]:.1f} | '
              f'{f("achieved_occupancy_pct")} | {f("ipc_per_sm", "%.2f")} | {f("warp_execution_efficiency_pct")} | '
              f'{f("global_load_sectors_per_request")} | {f("global_store_sectors_per_request")} | {f("shared_efficiency_pct")} | '
              f'{dram} | {f("tensor_pipe_active_pct")} | {tk} |')
    print()

def energy(name):
    print("## Energy per call on Li et al. 2016's Table I (batch 128, fp32, NCHW; NVML, one 0.5 s window per cell)\n")
    print("| problem | direction | fastest (ms, J) | least energy (ms, J) | own fastest (ms, J) | J/call spread of ok cells |")
    print("|---|---|---|---|---|---|")
    g = defaultdict(list)
    for c in load(name)["cells"]:
        if c["status"] == "ok" and c["joules_per_call_median"]:
            g[(c["problem"], c["direction"])].append(c)
    for (p, d), cs in sorted(g.items()):
        fast = min(cs, key=lambda c: c["time_ms_median"])
        low = min(cs, key=lambda c: c["joules_per_call_median"])
        own = [c for c in cs if c["implementation"].startswith("own:")]
        of = min(own, key=lambda c: c["time_ms_median"]) if own else None
        js = [c["joules_per_call_median"] for c in cs]
        fmt = lambda c: f'{c["implementation"]} ({c["time_ms_median"]:.3f}, {c["joules_per_call_median"]:.3f})'
        print(f"| {p.replace('n=128,', '')} | {d} | {fmt(fast)} | {fmt(low)} | {fmt(of) if of else '-'} | {min(js):.3f}-{max(js):.3f} |")
    print()

xcheck()
targets("call2_r50_3x3.json.gz", "Targets, NHWC (call 2): own:implicit_gemm against the fastest cuDNN algorithm or engine")
targets("call3_r50_3x3_nchw_before.json.gz", "Targets, NCHW forward, im2col kernel before the fix (call 3)")
targets("call4_im2col_after.json.gz", "Targets, NCHW forward, im2col kernel after the fix (call 4)")
counters("call2_r50_56_counters.json.gz")
energy("call2_li2016_energy.json.gz")
