"""python3 -m cnnergy.monitor [options] -- CMD ARGS...: runs a command and reports its time and
energy per GPU (and CPU), average and peak power, like `cnnergy monitor` (same options where they
overlap, same report and JSON keys, same exit status), through the cnnergy Python package."""
import argparse
import datetime
import os
import json
import signal
import subprocess
import sys
import time

import cnnergy


def _parse(argv):
    if "--" in argv:
        i = argv.index("--")
        argv, cmd = argv[:i], argv[i + 1:]
    else:
        cmd = []
    p = argparse.ArgumentParser(
        prog="python3 -m cnnergy.monitor",
        description="Run a command and report its time and energy per GPU (and CPU), average and "
                    "peak power, like `perf stat` for joules.",
        epilog="The report goes to stderr (or --output). Exit status: the command's own; 128+N if "
               "signal N killed it; 8 if it could not be started; 2 for bad options. "
               "SIGINT/SIGTERM/SIGHUP are forwarded to the command; changed GPU settings are "
               "restored when it ends (after a crash: `cnnergy restore`).")
    p.add_argument("--gpus", help="GPU indices to monitor (and to apply knobs to), e.g. 0,1 "
                                  "[default: all]")
    p.add_argument("--interval", type=float, default=0.0,
                   help="sampling interval in ms (default: the sensor's update period)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--output", help="write the report to this file instead of stderr")
    p.add_argument("--prometheus-port", type=int,
                   help="serve live OpenMetrics at http://127.0.0.1:PORT/metrics; 0: a free port")
    p.add_argument("--jsonl", help="stream one JSON object per sample and per window to this file")
    p.add_argument("--power-limit", type=float, help="run the command with this power limit, in W")
    p.add_argument("--sm-clock", help="run the command with the SM clock locked: MHz or MIN-MAX")
    args = p.parse_args(argv)
    if not cmd:
        p.error("needs a command: python3 -m cnnergy.monitor [options] -- CMD ARGS...")
    gpus = None
    if args.gpus:
        try:
            gpus = [int(x) for x in args.gpus.split(",")]
        except ValueError:
            p.error("--gpus: '%s' is not a list of GPU indices" % args.gpus)
    sm = None
    if args.sm_clock:
        parts = args.sm_clock.split("-")
        try:
            sm = (int(parts[0]), int(parts[-1])) if len(parts) <= 2 else None
        except ValueError:
            sm = None
        if sm is None:
            p.error("--sm-clock must be MHz or MIN-MAX in MHz, got '%s'" % args.sm_clock)
    return args, cmd, gpus, sm


def text_report(command, status_text, m, monitor):
    lines = ["", " cnnergy monitor: '%s' %s" % (command, status_text), "",
             "  elapsed          %.3f s" % m.time_s]
    for g in m.gpus:
        line = "  GPU %d energy     " % g.gpu
        if g.energy_j is None:
            line += "not available"
        else:
            line += "%.2f J" % g.energy_j
            if g.uncertainty_j is not None:
                line += " +- %.2f J" % g.uncertainty_j
            line += " (%s)" % g.source
            if g.avg_power_w is not None:
                line += "   average %.1f W" % g.avg_power_w
            if g.peak_power_w is not None:
                line += "   peak %.1f W" % g.peak_power_w
        lines.append(line)
    if len(m.gpus) > 1 and m.energy_j is not None:
        lines.append("  GPUs total       %.2f J" % m.energy_j)
    lines.append("  CPU energy       " + ("%.2f J (RAPL)" % m.cpu_energy_j
                                          if m.cpu_energy_j is not None
                                          else "not available (no readable RAPL)"))
    lines.append("  sampling         every %.1f ms, sensor updates every %.1f ms"
                 % (monitor.interval_ms, monitor.sensor_period_ms))
    if m.below_sensor_period and m.gpus:
        lines.append("  note: the command ran for less than one sensor update period; its energy "
                     "rests on one or two\n        sensor updates (run it several times in a loop "
                     "for a trustworthy number)")
    return "\n".join(lines) + "\n"


def _iso(t):
    """ISO-8601 UTC with milliseconds, as `cnnergy monitor` writes its timestamps."""
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.") + \
        "%03dZ" % int((t % 1) * 1000)


def _stat(v):
    return None if v is None else {"mean": v, "stddev": 0, "min": v, "max": v, "n": 1}


def json_report(cmd, exit_code, status_text, m, monitor, knobs, started, ended, cpu_times):
    """The report in `cnnergy monitor`'s JSON schema (SI units: s, W, J; one run, no repeats)."""
    run = {"exit_code": exit_code, "status": status_text, "started_at": _iso(started),
           "ended_at": _iso(ended), "elapsed_s": m.time_s,
           "user_cpu_s": cpu_times[0], "system_cpu_s": cpu_times[1],
           "gpus": [{"index": g.gpu, "source": g.source, "energy_j": g.energy_j,
                     "uncertainty_j": g.uncertainty_j, "average_power_w": g.avg_power_w,
                     "peak_power_w": g.peak_power_w, "samples": g.samples} for g in m.gpus],
           "gpu_energy_j": m.energy_j, "cpu_energy_j": m.cpu_energy_j,
           "short_window": m.below_sensor_period}
    summary = {"elapsed_s": _stat(m.time_s),
               "gpus": [{"index": g.gpu, "energy_j": _stat(g.energy_j),
                         "average_power_w": _stat(g.avg_power_w)} for g in m.gpus],
               "gpu_energy_j": _stat(m.energy_j), "cpu_energy_j": _stat(m.cpu_energy_j),
               "user_cpu_s": _stat(cpu_times[0]), "system_cpu_s": _stat(cpu_times[1])}
    return {"command": cmd, "exit_code": exit_code, "status": status_text,
            "started_at": run["started_at"], "ended_at": run["ended_at"], "repeats": 1,
            "runs": [run], "summary": summary,
            "sampler": {"interval_ms": monitor.interval_ms,
                        "sensor_period_ms": monitor.sensor_period_ms},
            "knobs": knobs}


def main(argv=None):
    args, cmd, gpus, sm = _parse(sys.argv[1:] if argv is None else argv)
    try:
        monitor = cnnergy.Monitor(gpus=gpus, interval_ms=args.interval,
                                  prometheus_port=args.prometheus_port, jsonl=args.jsonl)
    except cnnergy.CnnergyError as e:
        print("cnnergy: error: %s" % e, file=sys.stderr)
        return e.status
    if monitor.metrics_url:
        print("cnnergy: serving OpenMetrics at %s" % monitor.metrics_url, file=sys.stderr)
    leases, knobs = [], []
    try:
        for g in (gpus if gpus is not None else monitor.gpus):
            if args.power_limit is not None:
                cm = cnnergy.power_limit(args.power_limit, gpu=g)
                cm.__enter__()
                leases.append(cm)
                knobs.append("GPU %d: power limit %g W" % (g, args.power_limit))
            if sm is not None:
                cm = cnnergy.sm_clocks(sm[0], sm[1], gpu=g)
                cm.__enter__()
                leases.append(cm)
                knobs.append("GPU %d: lock SM clocks to %d-%d MHz" % (g, sm[0], sm[1]))
    except cnnergy.CnnergyError as e:
        for cm in reversed(leases):
            cm.__exit__(None, None, None)
        print("cnnergy: error: %s" % e, file=sys.stderr)
        return e.status

    child = None

    def forward(signo, _frame):
        if child is not None and child.poll() is None:
            child.send_signal(signo)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    label = " ".join(cmd)
    try:
        started = time.time()
        monitor.begin_window(label)
        try:
            child = subprocess.Popen(cmd)
        except OSError as e:
            monitor.end_window(label)
            print("cnnergy: error: cannot run '%s': %s" % (cmd[0], e.strerror), file=sys.stderr)
            return 8
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = rc = os.waitstatus_to_exitcode(status)
        ended = time.time()
        m = monitor.end_window(label, wait=True)
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        for cm in reversed(leases):
            cm.__exit__(None, None, None)
    if rc < 0:
        exit_code = 128 - rc
        status_text = "was killed by signal %d (%s)" % (-rc, signal.Signals(-rc).name)
    else:
        exit_code, status_text = rc, "exited with status %d" % rc
    report = (json.dumps(json_report(cmd, exit_code, status_text, m, monitor, knobs, started, ended,
                                     (usage.ru_utime, usage.ru_stime)), indent=2)
              + "\n" if args.json else text_report(label, status_text, m, monitor))
    monitor.close()
    if args.output:
        with open(args.output, "w") as f:
            f.write(report)
    else:
        sys.stderr.write(report)
    return exit_code


if __name__ == "__main__":
    sys.exit(main())
