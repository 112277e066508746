"""What the optimizers minimise, per training step: energy (J), time (s), EDP (J*s), ED2P (J*s^2) or
EDS(k) against the default setting (Krzywaniak et al. 2022, Eq. 4), each with its 95 % interval
over the profiled windows (the tuner's rules, src/tune/significance.cpp)."""
from ._errors import InvalidArgument
from ._stats import Stats, eds_interval, mean_interval

NAMES = ("energy", "time", "edp", "ed2p", "eds:K")


class Objective:
    """A parsed objective name: energy, time, edp, ed2p, eds (= eds:2) or eds:K with K > 1."""

    def __init__(self, text):
        if not isinstance(text, str):
            raise InvalidArgument("objective must be a name (%s), not %r"
                                  % (", ".join(NAMES), text))
        t = text.strip().lower()
        self.k = None
        if t in ("energy", "time", "edp", "ed2p"):
            self.kind = t
        elif t == "eds" or t.startswith("eds:"):
            try:
                self.k = float(t[4:]) if t.startswith("eds:") else 2.0
            except ValueError:
                self.k = None
            if self.k is None or not self.k > 1:
                raise InvalidArgument("objective %r: EDS needs k > 1, as eds:2 or eds:1.5" % text)
            self.kind = "eds"
        else:
            raise InvalidArgument("unknown objective %r; the valid ones are %s"
                                  % (text, ", ".join(NAMES)))

    @property
    def name(self):
        return "eds:%g" % self.k if self.kind == "eds" else self.kind

    @property
    def unit(self):
        return {"energy": "J/step", "time": "s/step", "edp": "J*s/step", "ed2p": "J*s^2/step",
                "eds": ""}[self.kind]

    def window_values(self, energies_j, times_s):
        """Per-window values of a metric objective (EDS: None, it needs the reference)."""
        if self.kind == "energy":
            return list(energies_j)
        if self.kind == "time":
            return list(times_s)
        if self.kind == "edp":
            return [e * t for e, t in zip(energies_j, times_s)]
        if self.kind == "ed2p":
            return [e * t * t for e, t in zip(energies_j, times_s)]
        return None

    def evaluate(self, energies_j, times_s, ref_energies_j, ref_times_s):
        """(value, Interval or None) of one setting from its windows' per-step energy and time."""
        vals = self.window_values(energies_j, times_s)
        if vals is not None:
            s = Stats(vals)
            return s.mean, mean_interval(s)
        e, t = Stats(energies_j), Stats(times_s)
        er, tr = Stats(ref_energies_j), Stats(ref_times_s)
        a = (self.k - 1) / (self.k * er.median)
        b = 1 / (self.k * tr.median)
        return a * e.mean + b * t.mean, eds_interval(e, t, er, tr, self.k)
