"""The settings an optimizer tries and holds: a setting is a dict of knobs ({} is the GPU's default;
{"power_limit_w": 300}, {"sm_clock_mhz": 1200}, {"memory_clock_mhz": 1593}), applied on every GPU
the optimizer tunes through the journaled knob leases of the C library (restored on release, at
exit, on SIGINT/SIGTERM/SIGHUP, and by `cnnergy restore` after kill -9)."""
import math

from ._errors import InvalidArgument, NotSupported

KNOBS = ("power_limit_w", "sm_clock_mhz", "memory_clock_mhz")


def describe(setting):
    """'default', 'power limit 300 W', 'SM clock 1200 MHz' ..."""
    if not setting:
        return "default"
    parts = []
    for k, v in sorted(setting.items()):
        if k == "power_limit_w":
            parts.append("power limit %g W" % v)
        elif k == "sm_clock_mhz":
            parts.append("SM clock %d MHz" % v)
        elif k == "memory_clock_mhz":
            parts.append("memory clock %d MHz" % v)
    return ", ".join(parts)


def key(setting):
    """A hashable, stable form of a setting."""
    return tuple(sorted(setting.items()))


def spread(values, count):
    """`count` values spread evenly over a sorted list (both ends included)."""
    values = sorted(set(values))
    if count >= len(values):
        return values
    if count <= 1:
        return [values[-1]]
    return sorted({values[round(i * (len(values) - 1) / (count - 1))] for i in range(count)})


def power_limit_candidates(info, count):
    lo, hi = info["power_limit_min_w"], info["power_limit_max_w"]
    default = info["power_limit_default_w"]
    if lo is None or hi is None or not hi > lo:
        raise NotSupported("GPU %d (%s) does not report its power-limit range"
                           % (info["index"], info["name"]))
    step = (hi - lo) / max(1, count - 1)
    values = {round(lo + i * step) for i in range(count)}
    if default is not None:
        values.discard(round(default))
    return [{"power_limit_w": float(v)} for v in sorted(values)]


def sm_clock_candidates(info, count):
    clocks = info["sm_clocks_mhz"]
    if len(clocks) < 2:
        raise NotSupported("GPU %d (%s) lists no SM clocks to lock" % (info["index"], info["name"]))
    return [{"sm_clock_mhz": int(c)} for c in spread(clocks, count)]


def memory_clock_candidates(info):
    clocks = info["mem_clocks_mhz"]
    return [{"memory_clock_mhz": int(c)} for c in sorted(clocks)[:-1]] if len(clocks) > 1 else []


def check_setting(setting, info):
    """InvalidArgument for a knob this GPU cannot take (before anything is changed)."""
    for k, v in setting.items():
        if k not in KNOBS:
            raise InvalidArgument("unknown knob %r; the knobs are %s" % (k, ", ".join(KNOBS)))
        if k == "power_limit_w":
            lo, hi = info["power_limit_min_w"], info["power_limit_max_w"]
            if not (isinstance(v, (int, float)) and math.isfinite(v)):
                raise InvalidArgument("power limit %r is not a number of watts" % (v,))
            if lo is not None and hi is not None and not lo <= v <= hi:
                raise InvalidArgument("power limit %g W is outside GPU %d's range %g-%g W"
                                      % (v, info["index"], lo, hi))
        elif k == "sm_clock_mhz" and int(v) not in info["sm_clocks_mhz"]:
            raise InvalidArgument("SM clock %r MHz is not one GPU %d supports" % (v, info["index"]))
        elif k == "memory_clock_mhz" and int(v) not in info["mem_clocks_mhz"]:
            raise InvalidArgument("memory clock %r MHz is not one GPU %d supports"
                                  % (v, info["index"]))


class KnobHolder:
    """Holds one setting on a list of GPUs at a time (dry run: changes nothing, says what it
    would do). Every change is a journaled lease of the C library."""

    def __init__(self, backend, gpus, dry_run, say):
        self._backend, self.gpus, self.dry_run, self._say = backend, list(gpus), dry_run, say
        self._leases = []
        self.current = {}

    def apply(self, setting):
        if key(setting) == key(self.current):
            return
        self.release()
        if self.dry_run:
            self.current = dict(setting)
            return
        taken = []
        try:
            for g in self.gpus:
                for k, v in sorted(setting.items()):
                    if k == "power_limit_w":
                        taken.append(self._backend.power_limit_set(g, float(v)))
                    elif k == "sm_clock_mhz":
                        taken.append(self._backend.sm_clocks_lock(g, int(v), int(v)))
                    elif k == "memory_clock_mhz":
                        taken.append(self._backend.memory_clock_set(g, int(v)))
        except BaseException:
            for lease in reversed(taken):
                self._backend.knob_release(lease)
            raise
        self._leases = taken
        self.current = dict(setting)

    def release(self):
        leases, self._leases = self._leases, []
        self.current = {}
        for lease in reversed(leases):
            self._backend.knob_release(lease)
