#!/usr/bin/env python3
"""`cnnergy exporter` on 8 simulated GPUs answers scrapes within 50 ms while a slow client (one byte
every 0.3 s) and a silent one hold connections open: p99 of 60 scrapes, each a fresh connection.

usage: exporter_slow_client.py CNNERGY FAKE_NVML_LIB WORK_DIR"""
import os
import socket
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster_util import Service, fail, free_port, http_get, wait_until  # noqa: E402

SCRAPES = 60
P99_LIMIT_MS = 50.0


def main():
    cnnergy, fake_nvml, work_root = sys.argv[1:4]
    os.makedirs(work_root, exist_ok=True)
    work = tempfile.mkdtemp(prefix="slow-", dir=os.path.abspath(work_root))
    env = dict(os.environ, CNNERGY_NVML_LIBRARY=fake_nvml, CNNERGY_FAKE_NVML_GPUS="8")
    port = free_port()
    exporter = Service("cnnergy exporter", [cnnergy, "exporter", "--port", str(port), "--interval-ms", "100"],
                       os.path.join(work, "exporter.log"), env)
    stop = threading.Event()
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        text = wait_until("the exporter's first scrape", lambda: (lambda t: t if 'gpu="7"' in t else None)(http_get(url)),
                          20, services=[exporter])
        silent = socket.create_connection(("127.0.0.1", port))

        def trickle():  # reconnects whenever the exporter drops it at its request deadline
            request = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
            while not stop.is_set():
                with socket.create_connection(("127.0.0.1", port)) as s:
                    try:
                        for byte in request[:-1]:
                            if stop.is_set():
                                return
                            s.sendall(bytes([byte]))
                            time.sleep(0.3)
                    except OSError:
                        pass  # dropped: connect again

        slow = threading.Thread(target=trickle, daemon=True)
        slow.start()
        time.sleep(0.5)
        times_ms = []
        for _ in range(SCRAPES):
            t0 = time.monotonic()
            body = http_get(url)
            times_ms.append((time.monotonic() - t0) * 1000.0)
            if 'gpu="7"' not in body:
                fail("a scrape lacks GPU 7:\n" + body[:1000])
            time.sleep(0.05)
        times_ms.sort()
        p50, p99 = times_ms[len(times_ms) // 2], times_ms[int(0.99 * len(times_ms)) - 1]
        print(f"[exporter] {SCRAPES} scrapes of 8 GPUs ({len(text)} bytes) beside a slow and a silent client: "
              f"p50 {p50:.2f} ms, p99 {p99:.2f} ms, max {times_ms[-1]:.2f} ms")
        if p99 > P99_LIMIT_MS:
            fail(f"p99 {p99:.1f} ms > {P99_LIMIT_MS} ms")
        silent.close()
    finally:
        stop.set()
        exporter.stop()
    print("exporter_slow_client: passed")


if __name__ == "__main__":
    main()
