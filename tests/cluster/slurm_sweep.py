#!/usr/bin/env python3
"""`cnnergy sweep --slurm` on a real single-node Slurm (Debian's slurm-wlm and munge): munged, slurmctld and
slurmd on loopback ports chosen at run time, with every state, spool, log, pid file and the munge key and
socket under a scratch folder, all stopped at the end (and killed with this process, PR_SET_PDEATHSIG).

A 12-trial CPU sweep (an external command; CNNERGY_BATCH = 1..12) goes out as a 4-task array plus its
merge job. One trial of task 2 hangs until a flag file exists: the test kills that task with scancel once
its first trial is stored, lets the merge job report the sweep incomplete, creates the flag and submits
the same command again: only task 2 runs again, only its missing trials are measured, and the merged
database holds all 12 trials once each, with their Slurm job ids, and the HTML report.
Bad input: no sbatch on PATH (message; --dry-run still prints the scripts), an sbatch refusal (its
message, nothing submitted), a shard of another sweep given to `merge --same-sweep` (refused, both keys).

usage: slurm_sweep.py CNNERGY WORK_DIR"""
import os
import re
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster_util import Service, fail, free_port, need_program, wait_until  # noqa: E402

SHARDS = 4


def slurm_conf(work, host, ctl_port, slurmd_port):
    return f"""# single-node Slurm for cnnergy's cluster test (everything under {work})
ClusterName=cnnergytest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctl_port}
SlurmdPort={slurmd_port}
AuthType=auth/munge
AuthInfo=socket={work}/munge/munge.socket
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={work}/state
SlurmdSpoolDir={work}/spool
SlurmctldPidFile={work}/slurmctld.pid
SlurmdPidFile={work}/slurmd.pid
SlurmctldLogFile={work}/slurmctld.log
SlurmdLogFile={work}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/builtin
SchedulerParameters=sched_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
KillWait=3
MinJobAge=600
InactiveLimit=0
NodeName={host} NodeAddr=127.0.0.1 CPUs=4 RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP
"""


class Cluster:
    def __init__(self, work):
        self.work = work
        self.env = dict(os.environ, SLURM_CONF=os.path.join(work, "slurm.conf"))
        self.services = []

    def run(self, argv, check=True, timeout=60, env=None):
        r = subprocess.run(argv, env=env or self.env, capture_output=True, text=True, timeout=timeout)
        if check and r.returncode != 0:
            fail(f"{' '.join(argv)} exited {r.returncode}:\n{r.stdout}\n{r.stderr}")
        return r

    def start(self):
        munged = need_program("munged", "munge")
        slurmctld = need_program("slurmctld", "slurm-wlm (slurmctld)")
        slurmd = need_program("slurmd", "slurm-wlm (slurmd)")
        for p, pkg in (("sbatch", "slurm-client"), ("squeue", "slurm-client"), ("scancel", "slurm-client"),
                       ("scontrol", "slurm-client"), ("sinfo", "slurm-client")):
            need_program(p, pkg)
        if os.geteuid() != 0:
            fail("a real slurmd runs jobs as any user only as root: run this test as root (CI does)")
        for d in ("munge", "state", "spool"):
            os.makedirs(os.path.join(self.work, d), mode=0o700)
        key = os.path.join(self.work, "munge", "munge.key")
        with open(os.open(key, os.O_WRONLY | os.O_CREAT, 0o600), "wb") as f:
            f.write(os.urandom(1024))
        sock = os.path.join(self.work, "munge", "munge.socket")
        m = Service("munged", [munged, "--foreground", "--force", f"--socket={sock}", f"--key-file={key}",
                               f"--log-file={self.work}/munge/munged.log", f"--pid-file={self.work}/munge/munged.pid",
                               f"--seed-file={self.work}/munge/munged.seed"], os.path.join(self.work, "munged.out"))
        self.services.append(m)
        wait_until("munged's socket", lambda: os.path.exists(sock), 20, services=[m])
        host = socket.gethostname().split(".")[0]
        with open(self.env["SLURM_CONF"], "w") as f:
            f.write(slurm_conf(self.work, host, free_port(), free_port()))
        ctl = Service("slurmctld", [slurmctld, "-D", "-i", "-f", self.env["SLURM_CONF"]],
                      os.path.join(self.work, "slurmctld.out"), self.env)
        self.services.append(ctl)
        d = Service("slurmd", [slurmd, "-D", "-f", self.env["SLURM_CONF"]], os.path.join(self.work, "slurmd.out"),
                    self.env)
        self.services.append(d)

        def node_idle():
            r = self.run(["sinfo", "-h", "-o", "%T"], check=False, timeout=20)
            return r.returncode == 0 and r.stdout.strip() == "idle"
        wait_until("the Slurm node to be idle (slurmctld and slurmd up; see slurmctld.log/slurmd.log in the scratch "
                   "folder)", node_idle, 60, interval_s=0.5, services=self.services)

    def job_state(self, job_id):
        r = self.run(["scontrol", "-o", "show", "job", str(job_id)], check=False)
        states = re.findall(r"JobState=(\S+)", r.stdout)
        return states

    def wait_job_done(self, job_id, timeout_s):
        def done():
            s = self.job_state(job_id)
            return s and all(x not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED") for x in s)
        wait_until(f"Slurm job {job_id} to end", done, timeout_s, interval_s=0.5, services=self.services)
        return self.job_state(job_id)

    def stop(self):
        if any(s.alive() for s in self.services[1:]):
            self.run(["scancel", "--full", "--user=root"], check=False, timeout=20)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                r = self.run(["squeue", "-h", "-o", "%i"], check=False, timeout=10)
                if r.returncode != 0 or not r.stdout.strip():
                    break
                time.sleep(0.5)
        for s in reversed(self.services):
            s.stop()


def trials(db):
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return con.execute("SELECT trial_key, status, started, slurm_job_id FROM trials ORDER BY trial_index").fetchall()
    finally:
        con.close()


def submitted(out, what):
    m = re.search(rf"submitted {what} job (\d+)", out)
    if not m:
        fail(f"no '{what}' job id in cnnergy's output:\n{out}")
    return m.group(1)


def main():
    cnnergy, work_root = sys.argv[1:3]
    work_root = os.path.abspath(work_root)
    os.makedirs(work_root, exist_ok=True)
    work = tempfile.mkdtemp(prefix="slurm-", dir=work_root)
    os.chmod(work, 0o755)
    cluster = Cluster(work)
    try:
        run_dir = os.path.join(work, "sweep")
        os.makedirs(run_dir)
        flag = os.path.join(run_dir, "release")
        db = os.path.join(run_dir, "sweep.db")
        report = os.path.join(run_dir, "report.html")
        hang = f'sleep 0.2; if [ "$CNNERGY_BATCH" = 6 ] && [ ! -e {flag} ]; then sleep 600; fi'
        sweep = [cnnergy, "sweep", "--batch", "1:12:1", "--warmup", "0", "--window-s", "0", "--min-iters", "1",
                 "-r", "1", "--db", db, "--report", report, "--slurm", "--shards", str(SHARDS)]
        cmd = ["--", "sh", "-c", hang]

        # Bad input before any daemon runs: no sbatch on PATH, and --dry-run without it.
        no_slurm = dict(os.environ, PATH="/nonexistent")
        r = subprocess.run(sweep + cmd, env=no_slurm, capture_output=True, text=True, timeout=60)
        if r.returncode == 0 or "sbatch is not on PATH" not in r.stderr:
            fail(f"--slurm without sbatch: exit {r.returncode}, stderr {r.stderr!r}")
        r = subprocess.run(sweep + ["--dry-run"] + cmd, env=no_slurm, capture_output=True, text=True, timeout=60)
        if r.returncode != 0 or f"#SBATCH --array=1-{SHARDS}" not in r.stdout or "merge --same-sweep" not in r.stdout:
            fail(f"--slurm --dry-run: exit {r.returncode}\n{r.stdout}\n{r.stderr}")
        if os.path.exists(db + ".slurm"):
            fail("--dry-run wrote the scripts' folder")

        t0 = time.monotonic()
        cluster.start()
        print(f"Slurm up in {time.monotonic() - t0:.1f} s", flush=True)

        # An sbatch refusal: its message, nothing submitted.
        r = cluster.run(sweep + ["--slurm-opt", "--partition=nosuchpartition"] + cmd, check=False)
        if r.returncode != 8 or "sbatch refused the array job" not in r.stderr or "partition" not in r.stderr.lower():
            fail(f"sbatch refusal: exit {r.returncode}, stderr {r.stderr!r}")
        if cluster.run(["squeue", "-h", "-o", "%i"]).stdout.strip():
            fail("a refused submission left a job in the queue")

        # The sweep as a 4-task array and its merge job.
        r = cluster.run(sweep + cmd)
        array1, merge1 = submitted(r.stdout, "array"), submitted(r.stdout, "merge")
        shard2 = os.path.join(db + ".slurm", f"shard-2-of-{SHARDS}.db")
        wait_until("task 2's first trial (batch=2) in its shard",
                   lambda: os.path.exists(shard2) and any(t[0] == "batch=2" and t[1] == "ok" for t in trials(shard2)),
                   120, interval_s=0.5, services=cluster.services)
        cluster.run(["scancel", f"{array1}_2"])
        states = cluster.wait_job_done(merge1, 180)
        print(f"first round: array {array1}, merge {merge1} ended {states}", flush=True)
        merge_log = open(os.path.join(db + ".slurm", f"merge-{merge1}.out")).read()
        if "sweep incomplete" not in merge_log or "--slurm" not in merge_log:
            fail(f"the merge job after a killed task does not say the sweep is incomplete:\n{merge_log}")
        first = {t[0]: t for t in trials(db)}
        if len(first) < 9 or "batch=6" in first and first["batch=6"][1] == "ok":
            fail(f"after the killed task the merged database holds {sorted(first)}")
        before = {t[0]: t for i in (1, 3, 4)
                  for t in trials(os.path.join(db + ".slurm", f"shard-{i}-of-{SHARDS}.db"))}
        if len(before) != 9:
            fail(f"shards 1, 3 and 4 should hold 9 trials, hold {sorted(before)}")

        # Re-submitting the same command: only shard 2 runs again, only its missing trials.
        open(flag, "w").close()
        r = cluster.run(sweep + cmd)
        if "shards 2 of 4" not in r.stdout:
            fail(f"the re-submission should run only shard 2:\n{r.stdout}")
        array2, merge2 = submitted(r.stdout, "array"), submitted(r.stdout, "merge")
        states = cluster.wait_job_done(merge2, 180)
        merge_log = open(os.path.join(db + ".slurm", f"merge-{merge2}.out")).read()
        if "complete" not in merge_log or not states or states[0] != "COMPLETED":
            fail(f"second merge job ended {states}:\n{merge_log}")
        final = trials(db)
        keys = [t[0] for t in final]
        if sorted(keys) != sorted(f"batch={b}" for b in range(1, 13)) or len(set(keys)) != 12:
            fail(f"the merged database should hold batch=1..12 once each, holds {keys}")
        bad = [t for t in final if t[1] != "ok"]
        if bad:
            fail(f"trials without a result after the re-submission: {bad}")
        for t in final:
            if t[0] in before and (t[2] != before[t[0]][2] or t[3] != before[t[0]][3]):
                fail(f"trial {t[0]} of a complete shard was measured again: {before[t[0]]} -> {t}")
            expected = f"{array2}_2" if t[0] in ("batch=6", "batch=10") else None
            if expected and t[3] != expected:
                fail(f"trial {t[0]} should carry Slurm job {expected}, carries {t[3]!r}")
            if not re.fullmatch(rf"({array1}|{array2})_[1-4]", t[3]):
                fail(f"trial {t[0]} carries Slurm job id {t[3]!r}")
        if first.get("batch=2") and dict((t[0], t) for t in final)["batch=2"][2] != first["batch=2"][2]:
            fail("batch=2, stored before the kill, was measured again")
        task_logs = [f for f in os.listdir(db + ".slurm") if f.endswith(f"-{array2}.out")]
        if task_logs != [f"task-2-{array2}.out"]:
            fail(f"the second array ran tasks {task_logs}")
        html = open(report).read()
        if "<html" not in html.lower() or "batch=12" not in html:
            fail("the merge job's HTML report lacks the trials")
        print(f"second round: array {array2} (task 2 only), merge {merge2}: 12 trials, report {len(html)} bytes")

        # A shard of another sweep given to merge: refused, naming both sweep keys, nothing written.
        other = os.path.join(run_dir, "other.db")
        cluster.run([cnnergy, "sweep", "--batch", "1", "--warmup", "0", "--window-s", "0", "--min-iters", "1", "-r",
                     "1", "--db", other, "--", "true"])
        out = os.path.join(run_dir, "mixed.db")
        r = cluster.run([cnnergy, "merge", "--same-sweep", out, os.path.join(db + ".slurm", "shard-1-of-4.db"), other],
                        check=False)
        keys_named = re.findall(r"sw-[0-9a-f]{16}", r.stderr)
        if r.returncode != 2 or len(set(keys_named)) != 2 or os.path.exists(out):
            fail(f"merge --same-sweep of another sweep's shard: exit {r.returncode}, stderr {r.stderr!r}")
        print(f"slurm sweep test passed in {time.monotonic() - t0:.1f} s")
    finally:
        cluster.stop()
        if os.environ.get("CNNERGY_KEEP_TEST_DIR") != "1":
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
