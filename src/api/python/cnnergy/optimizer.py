"""Optimizers that choose a GPU setting for the training they run inside, while it runs:

    opt = cnnergy.PowerLimitOptimizer(monitor, objective="energy", max_slowdown=0.10)
    for batch in loader:
        opt.on_step_begin(); train_step(batch); opt.on_step_end()

Profiling. The default setting (the reference) is measured first: its first steps calibrate how
many steps a window needs to span `min_window_periods` sensor update periods (the methodology's
rule; docs/methodology.md). Then rounds visit the reference and every live candidate, in an order
reversed every other round so that a slow drift (temperature, data) weighs on every setting alike, the
reference revisited in each round. After every change `warmup_steps` steps are discarded, and then
more until the GPUs have settled at the new setting: the steady-state rule of `cnnergy sweep
--settle-s` (Monitor.settle_check: the slopes of temperature and power over the span of one window
within 0.1 C/s and 1 %/s), checked about once a sensor period, at most `settle_s` seconds; every
rank must have settled. The waits are reported in the decision. From the third round on, a
candidate whose 95 % interval lies wholly above the best one's is dropped; the search ends when the
best is told apart from every other candidate and from the default, or when `max_rounds`,
`max_profile_steps` or `max_profile_s` is spent. A best that is not distinguishable from the
default keeps the default.

Decision. Held for the rest of the training through the journaled knobs (as root; otherwise
through cnnergyd), restored at close(), at exit, on SIGINT/SIGTERM/SIGHUP, and after kill -9 by
`cnnergy restore` (through cnnergyd: at once), and remembered in the
results database: the next run of the same job applies it at once and only re-checks it against
the default for `recheck_rounds` rounds.

Nothing here interrupts the training: after construction (which raises for bad arguments) a
failure is logged, the default setting is put back, and the steps go on unmeasured."""
import itertools
import logging
import math
import time

from . import _decisions, _knobs
from ._collective import default_collective
from ._errors import CnnergyError, InvalidArgument, NotSupported, PermissionDenied
from ._stats import INTERVAL_METHOD, Stats
from .objectives import Objective

log = logging.getLogger("cnnergy.optimizer")

_WINDOW_PREFIX = "cnnergy-opt"
_instances = itertools.count(1)  # unique window names, however many optimizers share a monitor


class _Visit:
    """One stay at a setting: warm-up steps, steps until the GPUs have settled (after a change),
    then one measured window of `steps` steps."""

    __slots__ = ("setting", "warmup_left", "steps", "done", "open", "name", "measurement",
                 "settling", "settle_since_ns", "settle_t0", "settle_steps")

    def __init__(self, setting, warmup, steps, name):
        self.setting, self.warmup_left, self.steps, self.name = setting, warmup, steps, name
        self.done, self.open, self.measurement = 0, False, None
        self.settling, self.settle_since_ns, self.settle_t0, self.settle_steps = False, 0, 0.0, 0


class _Optimizer:
    knob = ""  # "power_limit" / "clocks" (part of the remembered key)

    def __init__(self, monitor, objective="energy", max_slowdown=None, *, candidates=None,
                 candidate_count=6, gpus=None, job="", model=None, parameter_count=None,
                 batch_size=None, precision="", db=None, remember=True, dry_run=False,
                 max_profile_steps=5000, max_profile_s=900.0, warmup_steps=3,
                 min_window_periods=5, steps_per_window=None, min_rounds=3, max_rounds=10,
                 recheck_rounds=4, settle_s=30.0, settle_window_s=None, collective=None):
        from . import Monitor, _backend
        if monitor is None or not isinstance(monitor, Monitor):
            raise InvalidArgument("the optimizer needs a cnnergy.Monitor measuring the GPUs it "
                                  "tunes: cnnergy.%s(cnnergy.Monitor(gpus=[0]), ...)"
                                  % type(self).__name__)
        self.objective = Objective(objective)
        if max_slowdown is not None and not (isinstance(max_slowdown, (int, float))
                                             and max_slowdown > 0):
            raise InvalidArgument("max_slowdown must be > 0 (e.g. 0.10 for at most 10 %% slower "
                                  "per step than the default) or None, not %r" % (max_slowdown,))
        if not (isinstance(settle_s, (int, float)) and 0 <= settle_s <= 3600):
            raise InvalidArgument("settle_s is the longest wait for the GPUs to settle after a "
                                  "change, 0 to 3600 s (0: no wait), not %r" % (settle_s,))
        if settle_window_s is not None and not (isinstance(settle_window_s, (int, float))
                                                and settle_window_s > 0):
            raise InvalidArgument("settle_window_s must be > 0 (or None: one window's span)")
        for name, v in (("max_profile_steps", max_profile_steps), ("max_profile_s", max_profile_s),
                        ("min_window_periods", min_window_periods), ("min_rounds", min_rounds)):
            if not v > 0:
                raise InvalidArgument("%s must be > 0, not %r" % (name, v))
        if warmup_steps < 0 or recheck_rounds < 2 or max_rounds < min_rounds:
            raise InvalidArgument("warmup_steps >= 0, recheck_rounds >= 2 and max_rounds >= "
                                  "min_rounds, please")
        if steps_per_window is not None and int(steps_per_window) < 1:
            raise InvalidArgument("steps_per_window must be >= 1 (or None: calibrated)")
        self.monitor = monitor
        self.gpus = list(monitor.gpus if gpus is None else gpus)
        if not self.gpus:
            raise NotSupported("the monitor measures no GPU (no NVML here?): nothing to tune")
        missing = [g for g in self.gpus if g not in monitor.gpus]
        if missing:
            raise InvalidArgument("GPUs %s are not measured by the monitor (it measures %s)"
                                  % (missing, monitor.gpus))
        self.max_slowdown = None if max_slowdown is None else float(max_slowdown)
        if dry_run not in (False, True, "profile"):
            raise InvalidArgument("dry_run is False, True (profile nothing, say what it would do) "
                                  "or 'profile' (run the profile with no setting changed)")
        self.dry_run = bool(dry_run)
        self.dry_profile = dry_run == "profile"
        self.max_profile_steps, self.max_profile_s = int(max_profile_steps), float(max_profile_s)
        self.warmup_steps = int(warmup_steps)
        self.min_window_periods = float(min_window_periods)
        self.min_window_s = float(min_window_periods) * monitor.sensor_period_ms / 1000.0
        self._asked_steps_per_window = None if steps_per_window is None else int(steps_per_window)
        self.min_rounds, self.max_rounds = int(min_rounds), int(max_rounds)
        self.recheck_rounds = int(recheck_rounds)
        self.settle_s = float(settle_s)
        self._settle_window_s = None if settle_window_s is None else float(settle_window_s)
        self._settle_check_every = 1
        self._settle_waits = []   # (setting text, waited_s, settled) per change
        self._applied_key = ()    # the setting in force: the default until the first change
        self._backend = _backend
        self._collective = collective or default_collective()
        self.info = [_backend.gpu_knob_info(g) for g in self.gpus]
        if candidates is None:
            candidates = self._default_candidates(self.info[0], int(candidate_count))
        self.candidates = []
        for c in candidates:
            c = self._as_setting(c)
            for info in self.info:
                _knobs.check_setting(c, info)
            if c and _knobs.key(c) not in [_knobs.key(x) for x in self.candidates]:
                self.candidates.append(c)
        if parameter_count is None and model is not None:
            parameter_count = sum(int(p.numel()) for p in model.parameters())
        self.job_fields = {
            "gpu_name": self.info[0]["name"], "driver_version": self.info[0]["driver_version"],
            "model_name": str(job), "parameter_count": parameter_count,
            "batch_size": None if batch_size is None else int(batch_size),
            "precision": str(precision), "knob": self.knob, "objective": self.objective.name,
            "max_slowdown": self.max_slowdown, "gpu_count": len(self.gpus) * self.world_size}
        self.store = _decisions.DecisionStore(db or _decisions.default_path()) if remember else None
        self.messages = []
        self.decision = None      # dict once decided (see _decide)
        self.profile = {}         # describe(setting) -> per-step statistics of its windows
        self.remembered = None    # the remembered decision applied at start, if any
        self._holder = _knobs.KnobHolder(_backend, self.gpus, self.dry_run, self._say)
        self._windows = {}        # setting key -> [(energy_j, time_s, steps)]
        self._pending = []        # visits ended, results not yet read
        self._visits = []         # the rest of this round
        self._visit = None
        self._round = 0
        self._dropped = set()
        self._steps = 0
        self._started = None
        self._window_counter = 0
        self._instance = next(_instances)
        self._step_times = []
        self._last_begin = None
        self.steps_per_window = None
        self.state = "calibrate"  # calibrate, profile, recheck, hold, off

    # ---- what the subclasses define --------------------------------------------------------
    def _default_candidates(self, info, count):
        raise NotImplementedError

    @staticmethod
    def _as_setting(c):
        if not isinstance(c, dict):
            raise InvalidArgument("a candidate is a dict of knobs, e.g. {'power_limit_w': 300}")
        return dict(c)

    @property
    def world_size(self):
        return self._collective.world_size

    # ---- the two calls in the training loop ---------------------------------------------------
    def on_step_begin(self):
        if self.state in ("hold", "off"):
            return
        try:
            self._step_begin()
        except Exception as e:  # noqa: BLE001 (never interrupt the training)
            self._fail(e)

    def on_step_end(self):
        if self.state in ("hold", "off"):
            return
        try:
            self._step_end()
        except Exception as e:  # noqa: BLE001
            self._fail(e)

    def step(self):
        """A context manager around one training step: `with opt.step(): train_step(batch)`."""
        return _StepScope(self)

    # ---- state machine ------------------------------------------------------------------------
    def _step_begin(self):
        if self._started is None:
            self._start()
            if self.state in ("hold", "off"):
                return
        v = self._visit
        if self.state == "calibrate":
            self._last_begin = time.monotonic()
        elif v.warmup_left == 0 and not v.settling and not v.open:
            self.monitor.begin_window(v.name)
            v.open = True

    def _step_end(self):
        self._steps += 1
        v = self._visit
        if self.state == "calibrate":
            self._calibrate_step()
            return
        if v.warmup_left > 0:
            v.warmup_left -= 1
            return
        if v.settling:
            v.settle_steps += 1
            if v.settle_steps % self._settle_check_every == 0:
                self._check_settled(v)
            return
        v.done += 1
        if v.done < v.steps:
            return
        v.measurement = self.monitor.end_window(v.name)
        v.open = False
        self._pending.append(v)
        self._next_visit()

    def _start(self):
        self._started = time.monotonic()
        remembered = None
        if self.store is not None and self._collective.rank == 0:
            remembered = self.store.load(self.job_fields)
        remembered = self._collective.broadcast(remembered)  # rank 0's view for every rank
        if remembered is not None:
            try:
                for info in self.info:
                    _knobs.check_setting(remembered["setting"], info)
            except InvalidArgument as e:
                self._say("the remembered decision does not fit this GPU (%s); profiling again" % e,
                          logging.WARNING)
                remembered = None
        self.remembered = remembered
        if remembered is not None:
            self._say("remembered decision for this job: %s (%s); applying it and re-checking it "
                      "against the default" % (_knobs.describe(remembered["setting"]),
                                               remembered.get("verdict", "")))
            if not remembered["setting"]:
                self._finish_hold({}, "remembered: the default", None)
                return
            self.candidates = [dict(remembered["setting"])]
        if self.dry_run:
            self._say("dry run: nothing is changed; measuring the default to calibrate the windows"
                      + ("; then the profile runs with every visit at the default"
                         if self.dry_profile else ""))
        self.state = "calibrate"

    def _calibrate_step(self):
        if self._last_begin is not None:
            self._step_times.append(time.monotonic() - self._last_begin)
        seen = self._step_times[self.warmup_steps:]
        if len(seen) < 3 or len(seen) % 3:
            return  # checked every third step, at the same step on every rank
        enough = sum(seen) >= self.min_window_s or len(seen) >= 48
        step_s = Stats(seen).median
        enough, step_s = self._collective.broadcast((enough, step_s))  # rank 0's view
        if not enough:
            return
        # Each rank detected its own sensor's update period, and two detections can differ (a
        # period and its double, under load): a window spans the longest of them on every rank,
        # so that all ranks end their windows, and meet at the next collective, at the same step.
        mine = [0.0] * self.world_size
        mine[self._collective.rank] = self.min_window_s
        self.min_window_s = max(self._collective.sum_floats(mine))
        needed = max(1, int(math.ceil(self.min_window_s / max(step_s, 1e-9))))
        asked = self._asked_steps_per_window
        if asked is not None and asked < needed:
            self._say("steps_per_window=%d gives windows of %.0f ms, shorter than the %.0f ms "
                      "(%g sensor periods) a window must span: it needs at least %d steps per "
                      "window; using %d" % (asked, asked * step_s * 1e3, self.min_window_s * 1e3,
                                            self.min_window_periods, needed, needed),
                      logging.WARNING)
        self.steps_per_window = max(needed, asked or 0)
        self._settle_check_every = max(1, self.steps_per_window // 5)  # about a sensor period
        self._say("a step takes %.1f ms: %d steps per window (>= %.0f ms), %d warm-up steps after "
                  "every change" % (step_s * 1e3, self.steps_per_window, self.min_window_s * 1e3,
                                    self.warmup_steps))
        if self.dry_run and not self.dry_profile:
            self._say("dry run: would profile the default and %d candidates (%s), %d to %d "
                      "interleaved rounds with the default revisited each round, at most %d steps "
                      "or %.0f s, then hold the best for objective %s%s" % (
                          len(self.candidates),
                          "; ".join(_knobs.describe(c) for c in self.candidates),
                          self.min_rounds if self.remembered is None else self.recheck_rounds,
                          self.max_rounds if self.remembered is None else self.recheck_rounds,
                          self.max_profile_steps, self.max_profile_s, self.objective.name,
                          "" if self.max_slowdown is None else
                          " at most %.0f %% slower than the default" % (100 * self.max_slowdown)))
            self._finish_hold({}, "dry run: nothing changed", None)
            return
        self.state = "recheck" if self.remembered is not None else "profile"
        self._round = 0
        self._plan_round()
        self._visit = self._visits.pop(0)
        self._enter(self._visit)

    def _plan_round(self):
        live = [c for c in self.candidates if _knobs.key(c) not in self._dropped]
        order = live if self._round % 2 == 0 else list(reversed(live))
        self._visits = [self._new_visit({})] + [self._new_visit(c) for c in order]

    def _new_visit(self, setting):
        self._window_counter += 1
        return _Visit(setting, self.warmup_steps, self.steps_per_window,
                      "%s-%d-%d" % (_WINDOW_PREFIX, self._instance, self._window_counter))

    def _enter(self, visit):
        self._holder.apply(visit.setting)
        key = _knobs.key(visit.setting)
        # Every rank visits the same settings in the same order, so all agree on "changed".
        if key != self._applied_key and self.settle_s > 0:
            visit.settling = True
            visit.settle_since_ns, visit.settle_t0 = time.monotonic_ns(), time.monotonic()
        self._applied_key = key

    def _check_settled(self, v):
        """The steady-state rule on this rank's GPUs; the visit goes on to its window once every
        rank has settled, or once one has waited settle_s (the same step on every rank)."""
        window_s = self._settle_window_s or self.min_window_s
        c = self.monitor.settle_check(v.settle_since_ns, window_s=window_s)
        waited = time.monotonic() - v.settle_t0
        flags = self._collective.sum_floats([0.0 if c["settled"] else 1.0,
                                             1.0 if waited >= self.settle_s else 0.0])
        if flags[0] > 0 and flags[1] == 0:
            return
        v.settling = False
        settled = flags[0] == 0
        text = _knobs.describe(v.setting)
        self._settle_waits.append((text, waited, settled))
        if not settled:
            self._say("%s: not settled after %.1f s (%s); measuring anyway" % (
                text, waited, c["reason"] or "another rank had not settled"), logging.WARNING)

    def _settle_summary(self):
        if not self._settle_waits:
            return None
        waits = [w for _, w, _ in self._settle_waits]
        return {"changes": len(waits), "waited_s": sum(waits), "longest_s": max(waits),
                "not_settled": sum(1 for _, _, ok in self._settle_waits if not ok),
                "limit_s": self.settle_s}

    def _next_visit(self):
        first_of_round = self._visit.setting == {} and self._round > 0
        if first_of_round:  # the previous rounds' windows are all ready by now
            self._collect(final=False)
            if self.decision is not None:
                return
        if self._collective.broadcast(self._budget_spent()):  # rank 0's clock for every rank
            self._collect(final=True)
            return
        if not self._visits:
            self._round += 1
            limit = self.recheck_rounds if self.state == "recheck" else self.max_rounds
            if self._round >= limit:
                self._collect(final=True)
                return
            self._plan_round()
        self._visit = self._visits.pop(0)
        self._enter(self._visit)

    def _budget_spent(self):
        return (self._steps >= self.max_profile_steps
                or time.monotonic() - self._started >= self.max_profile_s)

    def _collect(self, final):
        """Reads the ended windows (all of them when final, else all but the last), sums each
        window's energy over the ranks, evaluates, drops the clearly worse and decides when done."""
        ready = self._pending if final else self._pending[:-1]
        self._pending = [] if final else self._pending[-1:]
        energies, times = [], []
        for v in ready:
            m = v.measurement.wait()
            energies.append(m.energy_j if m.energy_j is not None else math.nan)
            times.append(m.time_s)
            if m.below_sensor_period:
                self._say("window %s was shorter than one sensor period" % v.name, logging.WARNING)
        # Energies summed over the ranks, times averaged: every rank then evaluates the same
        # numbers, so all drop the same candidates and visit the same settings at the same steps.
        sums = self._collective.sum_floats(energies + times)
        world = self._collective.world_size
        energies, times = sums[:len(ready)], [t / world for t in sums[len(ready):]]
        for v, e, t in zip(ready, energies, times):
            if not math.isfinite(e):
                raise NotSupported("the monitor gives no energy for the tuned GPUs (no power "
                                   "sensor?): nothing to decide on")
            self._windows.setdefault(_knobs.key(v.setting), []).append((e, t, v.steps))
        table = self._evaluate()
        if not final and (self.state != "profile" or self._round < self.min_rounds):
            return  # a re-check runs its rounds to the end; a profile at least min_rounds
        if self.state == "recheck":
            self._decide(table, final)
            return
        best = table["best"]
        if best is None:
            if final:
                self._decide(table, final=True)
            return
        for k, row in table["rows"].items():
            if k == () or k == best or row["interval"] is None:
                continue
            bi = table["rows"][best]["interval"]
            clearly_worse = bi is not None and row["interval"][0] > bi[1]
            if clearly_worse or not row["feasible"]:
                if k not in self._dropped:
                    self._dropped.add(k)
                    self._say("dropping %s: %s" % (row["setting_text"], "clearly worse than the "
                              "best" if clearly_worse else "slower than max_slowdown allows"))
        # Done when the best is told apart from every other candidate and from the default (a
        # best that overlaps the default gets more rounds, up to the budget, before it is judged).
        live = [c for c in self.candidates if _knobs.key(c) not in self._dropped]
        ref_i, best_i = table["rows"][()]["interval"], table["rows"][best]["interval"]
        apart_from_default = best == () or (ref_i is not None and (
            best_i[0] > ref_i[1] or ref_i[0] > best_i[1]))
        told_apart = all(_knobs.key(c) == best for c in live) and apart_from_default
        if final or (told_apart and self.state == "profile"):
            self._decide(table, final)
        elif self.state == "profile":
            self._visits = [v for v in self._visits if _knobs.key(v.setting) not in self._dropped]

    def _evaluate(self):
        """Per setting: per-step energy and time statistics, the objective and its interval."""
        ref = self._windows.get(())
        rows, best = {}, None
        if not ref or len(ref) < 2:
            return {"rows": rows, "best": None}
        ref_e = [e / n for e, t, n in ref]
        ref_t = [t / n for e, t, n in ref]
        t_ref = Stats(ref_t).mean
        for k, wins in self._windows.items():
            if len(wins) < 2:
                continue
            e_step = [e / n for e, t, n in wins]
            t_step = [t / n for e, t, n in wins]
            value, interval = self.objective.evaluate(e_step, t_step, ref_e, ref_t)
            es, ts = Stats(e_step), Stats(t_step)
            feasible = (k == () or self.max_slowdown is None
                        or ts.mean <= (1 + self.max_slowdown) * t_ref)
            rows[k] = {"setting": dict(k), "setting_text": _knobs.describe(dict(k)),
                       "windows": len(wins), "energy_per_step_j": es.mean,
                       "energy_stddev_j": es.stddev, "time_per_step_s": ts.mean,
                       "time_stddev_s": ts.stddev, "objective": value,
                       "interval": None if interval is None else interval.as_list(),
                       "feasible": feasible}
            better = best is None or value < rows[best]["objective"]
            if feasible and interval is not None and better:
                best = k
        self.profile = {r["setting_text"]: r for r in rows.values()}
        return {"rows": rows, "best": best}

    def _decide(self, table, final):
        rows, best = table["rows"], table["best"]
        ref = rows.get(())
        decision = {"objective": self.objective.name, "max_slowdown": self.max_slowdown,
                    "interval_method": INTERVAL_METHOD, "profile_steps": self._steps,
                    "profile_s": time.monotonic() - self._started,
                    "rounds": len(self._windows.get((), [])),  # the default is in every round
                    "budget_spent": bool(final and self._budget_spent()),
                    "settle": self._settle_summary()}
        if self.state == "recheck":
            setting, verdict = self._recheck_verdict(rows)
        elif best is None or ref is None or best == ():
            setting, verdict = {}, ("the default is the best" if best == () else
                                    "not enough windows to decide: the default is kept")
        elif ref["interval"] is not None and rows[best]["interval"][0] <= ref["interval"][1] \
                and ref["interval"][0] <= rows[best]["interval"][1]:
            setting, verdict = {}, "not distinguishable from the default: the default is kept"
        else:
            setting = dict(best)
            others = [k for k in rows if k not in ((), best) and rows[k]["feasible"]]
            runner = min(others, key=lambda k: rows[k]["objective"]) if others else None
            overlap = runner is not None and rows[runner]["interval"] is not None and \
                rows[runner]["interval"][0] <= rows[best]["interval"][1]
            verdict = ("distinct; not distinguishable from the runner-up (%s)"
                       % rows[runner]["setting_text"]) if overlap else "distinct"
            decision["runner_up"] = None if runner is None else rows[runner]["setting"]
        chosen = rows.get(_knobs.key(setting)) or ref
        decision.update(setting=setting, verdict=verdict)
        if chosen is not None:
            decision.update(value=chosen["objective"], interval=chosen["interval"],
                            energy_per_step_j=chosen["energy_per_step_j"],
                            time_per_step_s=chosen["time_per_step_s"])
        if ref is not None and chosen is not None:
            decision.update(
                reference_value=ref["objective"], reference_interval=ref["interval"],
                energy_change_pct=100 * (chosen["energy_per_step_j"] / ref["energy_per_step_j"] - 1),
                time_change_pct=100 * (chosen["time_per_step_s"] / ref["time_per_step_s"] - 1))
        decision = self._collective.broadcast(decision)  # rank 0 decides, every rank applies
        recheck = self.state == "recheck"
        if self.dry_profile:
            self._say("dry run: the profile changed no setting (every visit ran at the default); "
                      "its verdict: %s" % verdict)
            decision["setting_not_applied"], decision["setting"] = decision["setting"], {}
        elif self.store is not None and self._collective.rank == 0:
            if recheck:
                holds = _knobs.key(decision["setting"]) == _knobs.key(self.remembered["setting"])
                self.store.mark_rechecked(self.job_fields, holds)
                if not holds:
                    self._say("the remembered decision no longer holds (%s): the default is kept "
                              "and the next run profiles again" % verdict, logging.WARNING)
            else:
                self.store.save(self.job_fields, decision,
                                {"rows": [r for r in rows.values()], "order": "interleaved, "
                                 "reference first in every round, reversed every other round"})
        self._finish_hold(decision["setting"], verdict, decision)

    def _recheck_verdict(self, rows):
        """A short re-check can refute a remembered decision, not prove it again: it is kept
        unless its interval lies wholly above the default's (or it breaks max_slowdown)."""
        mine = rows.get(_knobs.key(self.remembered["setting"]))
        ref = rows.get(())
        if mine is None or ref is None or mine["interval"] is None or ref["interval"] is None:
            return dict(self.remembered["setting"]), "remembered; too few windows to re-check it"
        if mine["interval"][0] > ref["interval"][1] or not mine["feasible"]:
            return {}, "re-checked: worse than the default now"
        return dict(self.remembered["setting"]), "remembered (%s); re-checked: not worse than " \
            "the default" % self.remembered.get("verdict", "")

    def _finish_hold(self, setting, verdict, decision):
        if decision is None:
            decision = {"setting": dict(setting), "verdict": verdict,
                        "objective": self.objective.name, "profile_steps": self._steps,
                        "profile_s": time.monotonic() - self._started}
        self.decision = decision
        self._visit, self._visits, self._pending = None, [], []
        try:
            self._holder.apply(setting)
        finally:
            self.state = "hold"
        st = decision.get("settle")
        if st:
            self._say("settling after %d changes took %.1f s (longest %.1f s; %d not settled "
                      "within %g s)" % (st["changes"], st["waited_s"], st["longest_s"],
                                        st["not_settled"], st["limit_s"]))
        e = decision.get("energy_change_pct")
        self._say("decision: %s (%s)%s" % (
            _knobs.describe(setting), verdict, "" if e is None else
            "; energy per step %+.1f %%, time per step %+.1f %% against the default"
            % (e, decision["time_change_pct"])))

    def _fail(self, e):
        hint = ""
        if isinstance(e, PermissionDenied):
            hint = (" Changing GPU settings needs root (or CAP_SYS_ADMIN), or the cnnergyd daemon "
                    "for other users (docs/daemon.md); use dry_run=True to measure only.")
        self._say("optimizer stopped, the training goes on at the default setting: %s.%s"
                  % (e, hint), logging.WARNING)
        self.state = "off"
        self._abandon_visits()
        try:
            self._holder.release()
        except CnnergyError as e2:
            self._say("could not restore the default (%s): run `cnnergy restore`" % e2,
                      logging.ERROR)

    def _say(self, text, level=logging.INFO):
        self.messages.append(text)
        log.log(level, "cnnergy %s: %s", type(self).__name__, text)

    # ---- the end ------------------------------------------------------------------------------
    def close(self):
        """Puts every GPU back to its default (also done at exit)."""
        if self.state != "off":
            self._fail_quiet()

    def _fail_quiet(self):
        self._abandon_visits()
        self.state = "off"
        self._holder.release()

    def _abandon_visits(self):
        """Ends the open window, if any, and forgets the visits planned."""
        v = self._visit
        if v is not None and v.open:
            try:
                self.monitor.end_window(v.name)
            except CnnergyError:
                pass
        self._visit, self._visits, self._pending = None, [], []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


class _StepScope:
    __slots__ = ("_opt",)

    def __init__(self, opt):
        self._opt = opt

    def __enter__(self):
        self._opt.on_step_begin()
        return self

    def __exit__(self, *exc):
        self._opt.on_step_end()
        return False


class PowerLimitOptimizer(_Optimizer):
    """Chooses a power limit for the training it runs in. Candidates: `candidate_count` limits
    spread over the GPU's allowed range (or `candidates=[{"power_limit_w": W}, ...]`)."""

    knob = "power_limit"

    def _default_candidates(self, info, count):
        return _knobs.power_limit_candidates(info, count)


class ClockOptimizer(_Optimizer):
    """Chooses locked SM clocks (and a memory clock where the GPU offers several, each tried with
    the SM clock left free) for the training it runs in. Candidates: `candidate_count` SM clocks
    spread over the supported ones (or `candidates=[{"sm_clock_mhz": MHz}, ...]`)."""

    knob = "clocks"

    def __init__(self, monitor, objective="energy", max_slowdown=None, *, memory_clocks=True,
                 **kwargs):
        self._memory_clocks = bool(memory_clocks)
        super().__init__(monitor, objective, max_slowdown, **kwargs)

    def _default_candidates(self, info, count):
        out = _knobs.sm_clock_candidates(info, count)
        if self._memory_clocks:
            out += _knobs.memory_clock_candidates(info)
        return out
