#!/usr/bin/env python3
"""`cnnergy exporter` scraped by a real Prometheus (Debian's `prometheus`), on loopback ports chosen at
run time, over the fake NVML device at a fixed power: after the scrapes, rate() of the energy counter
must equal the device's power within the fake sensor's tolerance, the Slurm job a prolog recorded must
label its GPU's series, and every PromQL expression of the Grafana dashboard must return data.
Also: a second exporter on the same port is refused with a clear message (exit 2). (Label escaping is
checked in tests/exporter.)

usage: prometheus_scrape.py CNNERGY FAKE_NVML_LIB SOURCE_DIR WORK_DIR"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster_util import Service, fail, free_port, http_get, need_program, prom_query, wait_until  # noqa: E402

POWER_W = 120.0        # CNNERGY_FAKE_NVML_POWER_W idle part; no dynamic part: the power is load-independent
NOISE = 0.01           # the fake sensor's +-1 % noise per 100 ms update
TOLERANCE = 0.03       # rate() over several updates: within 3 %
SCRAPE_S = 1


def dashboard_queries(path):
    with open(path) as f:
        dash = json.load(f)
    out = []

    def walk(panels):
        for p in panels:
            for t in p.get("targets", []):
                if t.get("expr"):
                    out.append((p.get("title", "?"), t["expr"]))
            walk(p.get("panels", []))
    walk(dash.get("panels", []))
    return out


def grafana_to_promql(expr):
    """The dashboard's variables as Grafana would fill them for a short range on every instance."""
    expr = expr.replace("$__rate_interval", "20s").replace("$__range", "30s").replace("$__interval", "5s")
    expr = expr.replace("${instance:regex}", ".*").replace("$instance", ".*")
    if "$" in expr:
        fail(f"dashboard expression uses a variable this test does not fill: {expr}")
    return expr


def main():
    cnnergy, fake_nvml, source_dir, work_root = sys.argv[1:5]
    prometheus = need_program("prometheus", "prometheus")
    work_root = os.path.abspath(work_root)
    os.makedirs(work_root, exist_ok=True)
    work = tempfile.mkdtemp(prefix="prom-", dir=work_root)
    services = []
    try:
        env = dict(os.environ, CNNERGY_NVML_LIBRARY=fake_nvml, CNNERGY_FAKE_NVML_GPUS="2",
                   CNNERGY_FAKE_NVML_POWER_W=f"{POWER_W},0,0", CNNERGY_FAKE_NVML_LOAD="0.6,0.3",
                   CNNERGY_FAKE_NVML_NOISE=str(NOISE))
        # A Slurm prolog records job 4242 on GPU 1 (the packaged script, with Slurm's variables).
        jobs = os.path.join(work, "jobs")
        subprocess.run([os.path.join(source_dir, "packaging/slurm/cnnergy-prolog.sh")], check=True,
                       env=dict(os.environ, CNNERGY_JOB_MAP_DIR=jobs, SLURM_JOB_ID="4242", SLURM_JOB_GPUS="1"))
        if open(os.path.join(jobs, "1")).read().strip() != "4242":
            fail("the prolog did not record job 4242 for GPU 1")

        port = free_port()
        exporter = Service("cnnergy exporter", [cnnergy, "exporter", "--port", str(port), "--interval-ms", "200",
                                                "--job-map-dir", jobs, "--json", os.path.join(work, "exporter.json")],
                           os.path.join(work, "exporter.log"), env)
        services.append(exporter)
        url = f"http://127.0.0.1:{port}/metrics"
        text = wait_until("the exporter's first scrape", lambda: (lambda t: t if "_total{" in t else None)(http_get(url)),
                          20, services=[exporter])
        for needle in ['cnnergy_gpu_energy_joules_total{gpu="0",uuid="GPU-', 'model="NVIDIA H200 (cnnergy fake)"',
                       '# UNIT cnnergy_gpu_energy_joules joules', '# TYPE cnnergy_gpu_energy_joules counter',
                       'gpu="1",', 'slurm_job_id="4242"']:
            if needle not in text:
                fail(f"the exporter's scrape lacks {needle!r}:\n{text[:2000]}")
        if re.search(r'gpu="0"[^}]*slurm_job_id', text):
            fail("GPU 0 carries a job label though no job holds it")

        # Bad input: the same port again is refused, naming the port.
        again = subprocess.run([cnnergy, "exporter", "--port", str(port)], env=env, capture_output=True, text=True,
                               timeout=30)
        if again.returncode != 2 or "another program uses this port" not in again.stderr:
            fail(f"a second exporter on port {port}: exit {again.returncode}, stderr {again.stderr!r}")

        prom_port = free_port()
        config = os.path.join(work, "prometheus.yml")
        with open(config, "w") as f:
            f.write(f"global:\n  scrape_interval: {SCRAPE_S}s\n  evaluation_interval: {SCRAPE_S}s\n"
                    f"scrape_configs:\n  - job_name: cnnergy\n    static_configs:\n"
                    f"      - targets: ['127.0.0.1:{port}']\n")
        prom = Service("prometheus", [prometheus, f"--config.file={config}", f"--storage.tsdb.path={work}/tsdb",
                                      f"--web.listen-address=127.0.0.1:{prom_port}", "--log.level=warn"],
                       os.path.join(work, "prometheus.log"))
        services.append(prom)
        wait_until("Prometheus to scrape the exporter twice",
                   lambda: any(float(r["value"][1]) >= 2 for r in
                               prom_query(prom_port, 'count_over_time(up{job="cnnergy"}[1m])')),
                   60, interval_s=0.5, services=[prom, exporter])
        up = prom_query(prom_port, 'up{job="cnnergy"}')
        if not up or up[0]["value"][1] != "1":
            fail(f"Prometheus says the exporter is not up: {up}")
        # rate() over a window of several sensor updates: the fake device's power.
        time.sleep(8)
        rates = prom_query(prom_port, "rate(cnnergy_gpu_energy_joules_total[6s])")
        if len(rates) != 2:
            fail(f"rate() of the energy counter: expected 2 GPUs, got {rates}")
        for r in rates:
            w = float(r["value"][1])
            print(f"GPU {r['metric']['gpu']}: rate(energy) = {w:.2f} W, fake device {POWER_W} W")
            if abs(w - POWER_W) > TOLERANCE * POWER_W:
                fail(f"rate(cnnergy_gpu_energy_joules_total) = {w:.2f} W on GPU {r['metric']['gpu']}, "
                     f"the fake device draws {POWER_W} W (+-{TOLERANCE:.0%})")

        queries = dashboard_queries(os.path.join(source_dir, "packaging/grafana/cnnergy.json"))
        if len(queries) < 8:
            fail(f"the dashboard has only {len(queries)} queries")
        # The dashboard's Node variable: label_values(cnnergy_gpu_power_watts, instance).
        if not prom_query(prom_port, "group by (instance) (cnnergy_gpu_power_watts)"):
            fail("no instance label for the dashboard's Node variable")
        for title, expr in queries:
            result = prom_query(prom_port, grafana_to_promql(expr))
            if not result:
                fail(f"dashboard panel '{title}': {expr} returned no data")
            print(f"ok  {title}: {len(result)} series")
        print(f"prometheus scrape test: {len(queries)} dashboard queries returned data")
        # SIGTERM: the exporter stops cleanly and says what it served.
        prom.stop()
        exporter.stop()
        if exporter.proc.returncode != 0:
            fail(f"the exporter exited {exporter.proc.returncode} on SIGTERM:\n{exporter.log_tail()}")
        summary = json.load(open(os.path.join(work, "exporter.json")))
        if summary["scrapes"] < 2 or len(summary["gpus"]) != 2 or summary["stopped_by_signal"] != 15:
            fail(f"the exporter's summary: {summary}")
    finally:
        for s in reversed(services):
            s.stop()
        if os.environ.get("CNNERGY_KEEP_TEST_DIR") != "1":
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
