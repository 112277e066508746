#!/usr/bin/env python3
"""The optimizers where the setting in force matters beyond one process (ctest sets the same
environment as for test_optimizer.py): settling after each change on the fake GPU with its thermal
model, and two torch.distributed ranks, each with its own fake GPU, deciding together."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

from test_optimizer import FakeModel, set_load

class SettleTest(unittest.TestCase):
    """On the fake GPU with its thermal model (the die heats with a time constant, leakage grows
    with temperature): after every change the optimizer keeps training, unmeasured, until the
    sweep's steady-state rule holds, and says how long that took; settle_s=0 measures at once."""

    CODE = textwrap.dedent("""
        import json, sys, time
        sys.path.insert(0, %r)
        import test_optimizer as t
        import cnnergy
        t.set_load(1.0)
        m = cnnergy.Monitor(gpus=[0], cpu=False)
        since = time.monotonic_ns()
        first = m.settle_check(since)
        time.sleep(0.2)
        later = m.settle_check(since, window_s=0.1)
        opt = cnnergy.PowerLimitOptimizer(m, "energy", remember=False, warmup_steps=1,
                                          candidates=[{"power_limit_w": 300.0}], min_rounds=2,
                                          max_rounds=2, settle_s=float(sys.argv[1]))
        t.train(opt, 20000, 5)
        opt.close()
        m.stop()
        try:
            m.settle_check(since)
            stopped = "no error"
        except cnnergy.InvalidArgument as e:
            stopped = str(e)
        print(json.dumps({"first": first, "later": later, "decision": opt.decision,
                          "messages": opt.messages, "stopped": stopped}))
    """ % os.path.dirname(os.path.abspath(__file__)))

    def run_case(self, settle_s):
        d = tempfile.mkdtemp(prefix="cnnergy-settle-")
        try:
            env = dict(os.environ, CNNERGY_FAKE_NVML_THERMAL="0.4,0.08,0.3",
                       CNNERGY_FAKE_NVML_STATE=os.path.join(d, "state"),
                       CNNERGY_JOURNAL=os.path.join(d, "journal.json"))
            p = subprocess.run([sys.executable, "-c", self.CODE, str(settle_s)], env=env,
                               capture_output=True, text=True, timeout=120)
        finally:
            shutil.rmtree(d, ignore_errors=True)
        self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        return json.loads(p.stdout.splitlines()[-1])

    def test_waits_after_each_change_until_the_rule_holds(self):
        out = self.run_case(20)
        self.assertFalse(out["first"]["settled"])  # no samples since the mark yet
        self.assertIn("samples", out["first"]["reason"])
        self.assertGreaterEqual(out["later"]["samples"], 5)
        self.assertIn("monitor is stopped", out["stopped"])
        st = out["decision"]["settle"]
        # default -> 300 W -> default -> 300 W: three changes, each a jump of the die temperature
        # that relaxes with tau = 0.4 s (over a degree per second at first): no change settles at once.
        self.assertEqual(st["changes"], 3, out["messages"])
        self.assertEqual(st["not_settled"], 0, out["messages"])
        self.assertGreater(st["waited_s"] / st["changes"], 0.3, st)
        self.assertLess(st["longest_s"], 20, st)
        self.assertTrue(any(m.startswith("settling after 3 changes took") for m in out["messages"]),
                        out["messages"])

    def test_settle_s_zero_measures_at_once(self):
        out = self.run_case(0)
        self.assertIsNone(out["decision"]["settle"])
        self.assertFalse(any(m.startswith("settling after") for m in out["messages"]))


class DistributedTest(unittest.TestCase):
    """Two ranks (torch.distributed over gloo), each measuring its own fake GPU: the energies are
    summed over the ranks, rank 0 decides, both apply the same setting to their own GPU."""

    RANK = textwrap.dedent("""
        import faulthandler, json, os, sys
        faulthandler.dump_traceback_later(90, exit=True)  # a hang says where, and ends
        sys.path.insert(0, %r)
        import torch.distributed as dist
        import test_optimizer as t
        import cnnergy
        rank = int(os.environ["RANK"])
        dist.init_process_group("gloo", rank=rank, world_size=2)
        m = cnnergy.Monitor(gpus=[rank], cpu=False)
        opt = cnnergy.PowerLimitOptimizer(m, "energy", remember=False, candidates=t.CANDIDATES,
                                          warmup_steps=2, gpus=[rank], max_rounds=6)
        step = t.SimStep(rank, gpu=rank)
        import torch
        for i in range(20000):
            opt.on_step_begin(); step(); opt.on_step_end()
            # Lockstep, as a data-parallel step's all-reduce makes it; both ranks stop together
            # (one that stopped alone would leave the other waiting at the next collective).
            done = torch.tensor([1 if opt.state in ("hold", "off") else 0])
            dist.all_reduce(done, op=dist.ReduceOp.MIN)
            if done.item():
                break
        print(json.dumps({"decision": opt.decision, "limit_w": t.power_limit_w(rank),
                          "messages": opt.messages}))
        opt.close()
        dist.barrier()
        print(json.dumps({"restored_w": t.power_limit_w(rank)}))
    """ % os.path.dirname(os.path.abspath(__file__)))

    def run_ranks(self):
        """Both ranks' JSON lines; a rank that hangs dumps its stack and ends (faulthandler)."""
        import socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        d = tempfile.mkdtemp(prefix="cnnergy-ddp-")
        procs, outs, errs = [], [], []
        try:
            for rank in range(2):
                env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                           MASTER_PORT=str(port), CNNERGY_FAKE_NVML_GPUS="2",
                           CNNERGY_FAKE_NVML_STATE=os.path.join(d, "state%d" % rank),
                           CNNERGY_JOURNAL=os.path.join(d, "journal%d.json" % rank))
                procs.append(subprocess.Popen([sys.executable, "-c", self.RANK], env=env, text=True,
                                              stdout=subprocess.PIPE, stderr=subprocess.PIPE))
            for p in procs:
                out, err = p.communicate(timeout=150)
                outs.append(out)
                errs.append(err)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
            shutil.rmtree(d, ignore_errors=True)
        for p in procs:
            self.assertEqual(p.returncode, 0, "\n".join("rank %d:\n%s" % (r, e[-2500:])
                                                         for r, e in enumerate(errs)))
        return [[json.loads(line) for line in out.splitlines()] for out in outs]

    def test_rank0_decides_every_rank_applies(self):
        try:
            import torch.distributed as dist
        except ImportError:
            self.fail("the data-parallel test needs torch (Debian: python3-torch)")
        self.assertTrue(dist.is_available() and dist.is_gloo_available())
        set_load(1.0)
        outs = self.run_ranks()
        d0, d1 = outs[0][0]["decision"], outs[1][0]["decision"]
        self.assertEqual(d0, d1)  # rank 0's decision, broadcast
        chosen = d0["setting"].get("power_limit_w", 700.0)
        self.assertEqual([o[0]["limit_w"] for o in outs], [chosen, chosen])
        self.assertEqual([o[1]["restored_w"] for o in outs], [700.0, 700.0])
        # The windows' energy is both GPUs' together: their average power is about twice one
        # GPU's. (Power, not energy per step: the fake GPUs draw at full load throughout, while a
        # busy machine stretches the steps and with them the energy per step.)
        model = FakeModel(1.0)
        one_gpu_w = model.power(model.clock(chosen))
        both_w = d0["energy_per_step_j"] / d0["time_per_step_s"]
        self.assertGreater(both_w, 1.6 * one_gpu_w, d0)
        self.assertLess(both_w, 2.6 * one_gpu_w, d0)


if __name__ == "__main__":
    unittest.main()
