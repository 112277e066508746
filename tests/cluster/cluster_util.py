"""Helpers of the cluster tests: free loopback ports, services started for one test and always stopped
(each dies with the test process too, through PR_SET_PDEATHSIG), bounded waits, and failing with a
reason that says what is missing."""
import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request

_libc = ctypes.CDLL("libc.so.6", use_errno=True)
_PR_SET_PDEATHSIG = 1


def fail(message):
    print("FAIL: " + message, file=sys.stderr, flush=True)
    sys.exit(1)


def need_program(name, package):
    path = shutil.which(name) or next((p for p in (f"/usr/sbin/{name}", f"/usr/bin/{name}") if os.access(p, os.X_OK)),
                                      None)
    if not path:
        fail(f"{name} is not installed (Debian package {package}; scripts/setup.sh installs it)")
    return path


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent():
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class Service:
    """A foreground daemon with its output in a log file; stop() ends it (SIGTERM, then SIGKILL)."""

    def __init__(self, name, argv, log_path, env=None):
        self.name, self.log_path = name, log_path
        self.log = open(log_path, "wb")
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT, env=env,
                                     preexec_fn=_die_with_parent)

    def alive(self):
        return self.proc.poll() is None

    def log_tail(self, lines=30):
        try:
            with open(self.log_path, "rb") as f:
                return b"\n".join(f.read().splitlines()[-lines:]).decode(errors="replace")
        except OSError:
            return "(no log)"

    def stop(self):
        if self.log.closed:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.log.close()


def wait_until(what, predicate, timeout_s, interval_s=0.2, services=()):
    """Polls predicate() until it returns a true value (returned); fails naming `what` after timeout_s,
    or at once when one of `services` died (with the end of its log)."""
    deadline = time.monotonic() + timeout_s
    last_error = None
    while time.monotonic() < deadline:
        for s in services:
            if not s.alive():
                fail(f"{s.name} exited (status {s.proc.returncode}) while waiting for {what}; its log:\n"
                     + s.log_tail())
        try:
            value = predicate()
            if value:
                return value
        except Exception as e:  # noqa: BLE001 - the service may not answer yet
            last_error = e
        time.sleep(interval_s)
    fail(f"timed out after {timeout_s:.0f} s waiting for {what}" + (f" (last error: {last_error})" if last_error else ""))


def http_get(url, timeout_s=5):
    with urllib.request.urlopen(url, timeout=timeout_s) as r:
        return r.read().decode()


def prom_query(port, expr):
    """Prometheus' HTTP API: the result vector of an instant query."""
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    doc = json.loads(http_get(url))
    if doc.get("status") != "success":
        raise RuntimeError(f"query {expr!r}: {doc}")
    return doc["data"]["result"]
