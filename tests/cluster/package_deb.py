#!/usr/bin/env python3
"""The Debian package from the build tree as it is (cpack -G DEB, nothing compiled again): its name and
contents, its maintainer scripts, then the installed programs. As root (CI), the package is installed
for real with dpkg -i: the cnnergy group exists, no unit is enabled or started, `cnnergy --version`,
`cnnergy devices` and cnnergyd (with `cnnergy daemon-state` through its socket) run from the installed
paths on the fake NVML, the Python package imports from dist-packages, and dpkg -r leaves nothing of ours
but the configuration files (which dpkg --purge then removes). Not as root, or with
CNNERGY_PACKAGE_TEST=extract, or where a cnnergy package is already installed, the package is unpacked
with dpkg -x into a scratch root instead and the same programs run from there.

usage: package_deb.py BUILD_DIR FAKE_NVML_LIB WORK_DIR"""
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster_util import Service, fail, need_program, wait_until  # noqa: E402

CONFFILES = {"/etc/cnnergy/cnnergyd.json", "/etc/default/cnnergy-exporter"}
EXPECTED = ["/usr/bin/cnnergy", "/usr/sbin/cnnergyd", "/usr/include/cnnergy/cnnergy.h",
            "/usr/lib/python3/dist-packages/cnnergy/__init__.py", "/lib/systemd/system/cnnergyd.service",
            "/lib/systemd/system/cnnergy-exporter.service", "/etc/cnnergy/cnnergyd.json",
            "/etc/default/cnnergy-exporter", "/usr/share/man/man1/cnnergy.1", "/usr/share/man/man1/cnnergy-sweep.1",
            "/usr/share/man/man1/cnnergy-exporter.1", "/usr/share/doc/cnnergy/cluster.md",
            "/usr/share/doc/cnnergy/README.md", "/usr/share/cnnergy/grafana/cnnergy.json",
            "/usr/share/cnnergy/slurm/cnnergy-prolog.sh", "/usr/share/doc/cnnergy/examples/cnnergyd.policy.example"]


def run(argv, check=True, env=None, timeout=300):
    r = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout)
    if check and r.returncode != 0:
        fail(f"{' '.join(argv)} exited {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return r


def dpkg(args):
    """dpkg, waiting (bounded) while another dpkg or apt holds its lock."""
    deadline = time.monotonic() + 180
    while True:
        r = run(["dpkg"] + args, check=False)
        if r.returncode == 0:
            return r
        if "lock" not in r.stderr or time.monotonic() > deadline:
            fail(f"dpkg {' '.join(args)} exited {r.returncode}:\n{r.stdout}\n{r.stderr}")
        time.sleep(2)


def check_programs(root, fake_nvml, work):
    """The installed programs, run from their installed paths, on the fake NVML."""
    env = dict(os.environ, CNNERGY_NVML_LIBRARY=fake_nvml, CNNERGY_FAKE_NVML_GPUS="2",
               CNNERGY_FAKE_NVML_STATE=os.path.join(work, "fake-state"), HOME=work)
    if root != "/":
        env["LD_LIBRARY_PATH"] = os.path.join(root, "usr/lib")
    cnnergy = os.path.join(root, "usr/bin/cnnergy")
    v = run([cnnergy, "--version"], env=env)
    print("installed:", v.stdout.strip().splitlines()[0])
    d = run([cnnergy, "devices", "--format", "json"], env=env)
    devices = json.loads(d.stdout)
    text = json.dumps(devices)
    if "cnnergy fake" not in text:
        fail(f"`cnnergy devices` from {cnnergy} does not list the fake GPUs:\n{d.stdout[:1000]}")
    # The daemon from its installed path, with a policy of the installed example's shape but its socket and
    # journal in the scratch folder (the installed /etc policy is the administrator's to edit).
    with open(os.path.join(root, "etc/cnnergy/cnnergyd.json")) as f:
        policy = json.load(f)
    policy.update(socket_path=os.path.join(work, "cnnergyd.sock"), state_dir=os.path.join(work, "state"),
                  socket_group=str(os.getgid()), groups=[], users=[])
    policy_path = os.path.join(work, "policy.json")
    with open(policy_path, "w") as f:
        json.dump(policy, f)
    cnnergyd = os.path.join(root, "usr/sbin/cnnergyd")
    run([cnnergyd, "--check", "--policy", policy_path], env=env)
    daemon = Service("cnnergyd", [cnnergyd, "--policy", policy_path], os.path.join(work, "cnnergyd.log"), env)
    try:
        wait_until("cnnergyd's socket", lambda: os.path.exists(policy["socket_path"]), 30, services=[daemon])
        s = run([cnnergy, "daemon-state"], env=dict(env, CNNERGY_DAEMON_SOCKET=policy["socket_path"]))
        if "cnnergy fake" not in s.stdout and "GPU" not in s.stdout:
            fail(f"`cnnergy daemon-state` through the installed daemon:\n{s.stdout}")
    finally:
        daemon.stop()
    if daemon.proc.returncode not in (0, -15):
        fail(f"cnnergyd exited {daemon.proc.returncode} on SIGTERM:\n{daemon.log_tail()}")
    # The Python package (for users who do not install the wheel), with the system's Python.
    py = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else shutil.which("python3")
    pyenv = dict(env, PYTHONPATH=os.path.join(root, "usr/lib/python3/dist-packages")) if root != "/" else env
    r = run([py, "-c", "import cnnergy, sys; print(cnnergy.__file__)"], env=pyenv)
    if not r.stdout.strip().startswith(os.path.join(root, "usr/lib/python3/dist-packages")):
        fail(f"the Python package imported from {r.stdout.strip()}, not the installed one")
    page = open(os.path.join(root, "usr/share/man/man1/cnnergy-sweep.1")).read()
    if not page.startswith(".TH CNNERGY-SWEEP 1") or "--slurm" not in page:
        fail("the installed cnnergy-sweep(1) page is not the command's --help")


def main():
    build, fake_nvml, work_root = sys.argv[1:4]
    for prog, pkg in (("cpack", "cmake"), ("dpkg-deb", "dpkg"), ("dpkg-shlibdeps", "dpkg-dev")):
        need_program(prog, pkg)
    work_root = os.path.abspath(work_root)
    os.makedirs(work_root, exist_ok=True)
    work = tempfile.mkdtemp(prefix="deb-", dir=work_root)
    installed = False
    try:
        t0 = time.monotonic()
        run(["cpack", "-G", "DEB", "--config", os.path.join(build, "CPackConfig.cmake"), "-B",
             os.path.join(work, "out")], timeout=600)
        debs = glob.glob(os.path.join(work, "out", "*.deb"))
        if len(debs) != 1 or not re.fullmatch(r"cnnergy_\d+\.\d+\.\d+_amd64\.deb", os.path.basename(debs[0])):
            fail(f"cpack should write one cnnergy_VERSION_amd64.deb, wrote {debs}")
        deb = debs[0]
        print(f"built {os.path.basename(deb)} ({os.path.getsize(deb) / 1e6:.1f} MB) in {time.monotonic() - t0:.1f} s")
        info = run(["dpkg-deb", "--info", deb]).stdout
        for needle in ("Package: cnnergy", "postinst", "prerm", "postrm", "conffiles", "Depends:"):
            if needle not in info:
                fail(f"dpkg-deb --info lacks {needle!r}:\n{info}")
        listing = run(["dpkg-deb", "--contents", deb]).stdout
        files = {"/" + line.split()[-1].lstrip("./") for line in listing.splitlines() if not line.startswith("d")}
        missing = [f for f in EXPECTED if f not in files]
        if missing or not any(re.fullmatch(r"/usr/lib/(x86_64-linux-gnu/)?libcnnergy\.so\.1.*", f) for f in files) \
                or not any(f.endswith("pkgconfig/cnnergy.pc") for f in files):
            fail(f"the package lacks {missing or 'libcnnergy.so / cnnergy.pc'}:\n{listing[:3000]}")
        conf = run(["dpkg-deb", "--ctrl-tarfile", deb]).stdout  # noqa: F841 - readable
        postinst = run(["dpkg-deb", "-I", deb, "postinst"]).stdout
        if "systemctl enable" in postinst or "systemctl start" in postinst or "addgroup --system" not in postinst:
            fail(f"postinst must create the group and enable nothing:\n{postinst}")

        mode = os.environ.get("CNNERGY_PACKAGE_TEST", "install" if os.geteuid() == 0 else "extract")
        if mode == "install" and run(["dpkg-query", "-W", "cnnergy"], check=False).returncode == 0:
            print("a cnnergy package is already installed here: unpacking into a scratch root instead")
            mode = "extract"
        if mode == "install":
            dpkg(["-i", deb])
            installed = True
            if run(["getent", "group", "cnnergy"], check=False).returncode != 0:
                fail("postinst did not create the cnnergy group")
            enabled = glob.glob("/etc/systemd/system/*.wants/cnnergy*")
            if enabled:
                fail(f"installing enabled units: {enabled}")
            check_programs("/", fake_nvml, work)
            dpkg(["-r", "cnnergy"])
            installed = False
            left = sorted(f for f in files if os.path.lexists(f))
            if set(left) != CONFFILES:
                fail(f"dpkg -r should leave only the configuration files, left {left}")
            dpkg(["--purge", "cnnergy"])
            left = sorted(f for f in files if os.path.lexists(f))
            if left:
                fail(f"dpkg --purge left {left}")
            print("dpkg -i / -r / --purge: installed, ran and removed cleanly")
        else:
            root = os.path.join(work, "root")
            run(["dpkg-deb", "-x", deb, root])
            check_programs(root, fake_nvml, work)
            print(f"dpkg -x into {root}: the programs ran from the unpacked paths (not root: no dpkg -i)")
        print(f"package test passed in {time.monotonic() - t0:.1f} s")
    finally:
        if installed:
            run(["dpkg", "--purge", "cnnergy"], check=False)
        if os.environ.get("CNNERGY_KEEP_TEST_DIR") != "1":
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
