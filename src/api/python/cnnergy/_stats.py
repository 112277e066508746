"""The statistics of the optimizer's verdicts, the same formulas as the C++ tuner's
(src/tune/significance.cpp, src/tune/metrics.cpp): a 95 % Student t-interval of the mean over
repeated windows, EDS(k)'s interval as the sum of the energy and time intervals, and "not
distinguishable" when two intervals overlap. tests/api check that both give the same numbers."""
import math

INTERVAL_METHOD = "95 % t-interval of the mean over the repetitions"

# t(0.975, df) for df = 1..30, then the Cornish-Fisher expansion (as significance.cpp).
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
         2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
         2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t_quantile_975(df):
    """Two-sided 95 % quantile of Student's t with df degrees of freedom."""
    if df <= 0:
        return math.inf
    if df <= len(_T975):
        return _T975[df - 1]
    z, n = 1.959964, float(df)
    return z + (z ** 3 + z) / (4 * n) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * n * n)


class Stats:
    """n, mean, median, sample standard deviation (n-1; 0 when n < 2), min, max of finite values."""

    __slots__ = ("n", "mean", "median", "stddev", "min", "max")

    def __init__(self, values):
        v = sorted(x for x in values if x is not None and math.isfinite(x))
        if not v:
            raise ValueError("no finite values")
        n = len(v)
        self.n = n
        self.mean = math.fsum(v) / n
        self.median = v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])
        self.stddev = (math.sqrt(math.fsum((x - self.mean) ** 2 for x in v) / (n - 1))
                       if n > 1 else 0.0)
        self.min, self.max = v[0], v[-1]


class Interval:
    __slots__ = ("low", "high")

    def __init__(self, low, high):
        self.low, self.high = low, high

    def overlaps(self, other):
        return self.low <= other.high and other.low <= self.high

    @property
    def half_width(self):
        return 0.5 * (self.high - self.low)

    @property
    def centre(self):
        return 0.5 * (self.low + self.high)

    def as_list(self):
        return [self.low, self.high]

    def __repr__(self):
        return "Interval(%.6g, %.6g)" % (self.low, self.high)


def mean_interval(stats):
    """mean +- t(0.975, n-1) * stddev / sqrt(n); None for fewer than two values."""
    if stats.n < 2 or not math.isfinite(stats.mean) or not math.isfinite(stats.stddev):
        return None
    h = t_quantile_975(stats.n - 1) * stats.stddev / math.sqrt(stats.n)
    return Interval(stats.mean - h, stats.mean + h)


def eds(energy, time, energy_ref, time_ref, k):
    """EDS(k) (Krzywaniak et al. 2022, Eq. 4): 1 at the reference, below 1 better."""
    return (k - 1) / (k * energy_ref) * energy + time / (k * time_ref)


def eds_interval(e_stats, t_stats, e_ref_stats, t_ref_stats, k):
    """EDS(k) = a E + b t over one trial's windows, against the reference's medians: centre a*mean(E)
    + b*mean(t), half-width |a| hE + b ht (valid however E and t correlate), as significance.cpp."""
    ei, ti = mean_interval(e_stats), mean_interval(t_stats)
    if ei is None or ti is None:
        return None
    a = (k - 1) / (k * e_ref_stats.median)
    b = 1 / (k * t_ref_stats.median)
    centre = a * e_stats.mean + b * t_stats.mean
    h = abs(a) * ei.half_width + b * ti.half_width
    return Interval(centre - h, centre + h)
