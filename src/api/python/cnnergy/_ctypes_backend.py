"""The ctypes backend of the cnnergy package: the same functions as the pybind11 module
(_cnnergy_ext), over libcnnergy.so through ctypes. Used where the extension was not built for the
running Python (e.g. a build tree from another machine), so the package needs no compiler there.
The library is found at $CNNERGY_LIBRARY, beside this package, or in ../../lib of a build tree."""
import ctypes
import math
import os

from ._errors import raise_for

MAX_GPUS = 64
NAME_MAX = 128
NOT_READY = 9
_SOURCES = {0: "none", 1: "counter", 2: "integrated_power"}


class _Options(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("gpus", ctypes.POINTER(ctypes.c_uint)),
                ("gpu_count", ctypes.c_size_t), ("interval_ms", ctypes.c_double),
                ("cpu", ctypes.c_int), ("start", ctypes.c_int)]


class _GpuInfo(ctypes.Structure):
    _fields_ = [("index", ctypes.c_uint), ("uuid", ctypes.c_char * 96),
                ("name", ctypes.c_char * 96), ("has_energy_counter", ctypes.c_int)]


class _GpuEnergy(ctypes.Structure):
    _fields_ = [("gpu_index", ctypes.c_uint), ("source", ctypes.c_int),
                ("energy_j", ctypes.c_double), ("uncertainty_j", ctypes.c_double),
                ("avg_power_w", ctypes.c_double), ("peak_power_w", ctypes.c_double),
                ("samples", ctypes.c_size_t)]


class _Measurement(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("name", ctypes.c_char * NAME_MAX),
                ("time_s", ctypes.c_double), ("begin_s", ctypes.c_double),
                ("end_s", ctypes.c_double), ("energy_j", ctypes.c_double),
                ("uncertainty_j", ctypes.c_double), ("avg_power_w", ctypes.c_double),
                ("peak_power_w", ctypes.c_double), ("source", ctypes.c_int),
                ("cpu_energy_j", ctypes.c_double), ("below_sensor_period", ctypes.c_int),
                ("sensor_period_ms", ctypes.c_double), ("gpu_count", ctypes.c_size_t),
                ("gpus", _GpuEnergy * MAX_GPUS)]


class _SettleCheck(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("settled", ctypes.c_int),
                ("samples", ctypes.c_size_t), ("temp_slope_c_per_s", ctypes.c_double),
                ("power_slope_per_s", ctypes.c_double), ("reason", ctypes.c_char * 256)]


def _candidates():
    env = os.environ.get("CNNERGY_LIBRARY")
    if env:
        return [env]
    here = os.path.dirname(os.path.abspath(__file__))
    return [os.path.join(here, "libcnnergy.so.1"),
            os.path.normpath(os.path.join(here, "..", "..", "lib", "libcnnergy.so.1")),
            "libcnnergy.so.1"]


def _load():
    errors = []
    for path in _candidates():
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            errors.append("%s: %s" % (path, e))
    raise ImportError("cnnergy: cannot load libcnnergy (set CNNERGY_LIBRARY): " + "; ".join(errors))


_lib, library_path = _load()
_u64 = ctypes.c_uint64
_lib.cnnergy_api_version.restype = ctypes.c_uint
_lib.cnnergy_last_error.restype = ctypes.c_char_p
_lib.cnnergy_monitor_options_init.argtypes = [ctypes.POINTER(_Options)]
_lib.cnnergy_monitor_open.argtypes = [ctypes.POINTER(_Options), ctypes.POINTER(ctypes.c_void_p)]
_lib.cnnergy_monitor_close.argtypes = [ctypes.c_void_p]
for _f in ("cnnergy_monitor_start", "cnnergy_monitor_stop", "cnnergy_monitor_running",
           "cnnergy_monitor_has_cpu"):
    getattr(_lib, _f).argtypes = [ctypes.c_void_p]
_lib.cnnergy_monitor_gpu_count.argtypes = [ctypes.c_void_p]
_lib.cnnergy_monitor_gpu_count.restype = ctypes.c_size_t
_lib.cnnergy_monitor_gpu_info.argtypes = [ctypes.c_void_p, ctypes.c_size_t,
                                          ctypes.POINTER(_GpuInfo)]
for _f in ("cnnergy_monitor_sensor_period_ms", "cnnergy_monitor_interval_ms"):
    getattr(_lib, _f).argtypes = [ctypes.c_void_p]
    getattr(_lib, _f).restype = ctypes.c_double
_lib.cnnergy_monitor_settle_check.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_double,
                                              ctypes.c_double, ctypes.c_double,
                                              ctypes.POINTER(_SettleCheck)]
for _f in ("cnnergy_window_begin", "cnnergy_window_end"):
    getattr(_lib, _f).argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(_u64)]
# Calls that never wait go through a PyDLL handle, which keeps the GIL: begin, end, discard (an
# unread Measurement's __del__ runs it inside end_window's caller) and result without waiting.
# A CDLL call releases the GIL and must win it back; right after a PyTorch step its autograd
# thread wants the GIL too, and end_window (end + the discard of the unread result) cost 43 us
# median on an H100 while discard still went through CDLL.
_held = ctypes.PyDLL(library_path)
for _f in ("cnnergy_window_begin", "cnnergy_window_end"):
    getattr(_held, _f).argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(_u64)]
_held.cnnergy_window_discard.argtypes = [ctypes.c_void_p, _u64]
for _f in ("cnnergy_window_begin_at", "cnnergy_window_end_at"):
    getattr(_held, _f).argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int64,
                                   ctypes.POINTER(_u64)]
_held.cnnergy_now_ns.restype = ctypes.c_int64
_held.cnnergy_monitor_window_count.argtypes = [ctypes.c_void_p]
_held.cnnergy_monitor_window_count.restype = ctypes.c_size_t
_held.cnnergy_window_result.argtypes = [ctypes.c_void_p, _u64, ctypes.c_double,
                                        ctypes.POINTER(_Measurement)]
_lib.cnnergy_window_result.argtypes = [ctypes.c_void_p, _u64, ctypes.c_double,
                                       ctypes.POINTER(_Measurement)]
_lib.cnnergy_window_discard.argtypes = [ctypes.c_void_p, _u64]
_lib.cnnergy_monitor_export.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p,
                                        ctypes.POINTER(ctypes.c_uint)]
_lib.cnnergy_power_limit_set.argtypes = [ctypes.c_uint, ctypes.c_double, ctypes.POINTER(_u64)]
_lib.cnnergy_sm_clocks_lock.argtypes = [ctypes.c_uint, ctypes.c_uint, ctypes.c_uint,
                                        ctypes.POINTER(_u64)]
_lib.cnnergy_knob_release.argtypes = [_u64]
_MAX_CLOCKS = 512


class _KnobInfo(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("index", ctypes.c_uint),
                ("name", ctypes.c_char * 96), ("uuid", ctypes.c_char * 96),
                ("driver_version", ctypes.c_char * 80),
                ("power_limit_min_w", ctypes.c_double), ("power_limit_max_w", ctypes.c_double),
                ("power_limit_default_w", ctypes.c_double),
                ("power_limit_current_w", ctypes.c_double),
                ("sm_clock_count", ctypes.c_size_t), ("sm_clocks_mhz", ctypes.c_uint * _MAX_CLOCKS),
                ("mem_clock_count", ctypes.c_size_t),
                ("mem_clocks_mhz", ctypes.c_uint * _MAX_CLOCKS)]


_lib.cnnergy_gpu_knob_info_init.argtypes = [ctypes.POINTER(_KnobInfo)]
_lib.cnnergy_gpu_knob_info_get.argtypes = [ctypes.c_uint, ctypes.POINTER(_KnobInfo)]
_lib.cnnergy_memory_clock_set.argtypes = [ctypes.c_uint, ctypes.c_uint, ctypes.POINTER(_u64)]
_lib.cnnergy_knob_active.restype = ctypes.c_size_t


def _check(status):
    if status != 0:
        raise_for(status, _lib.cnnergy_last_error().decode("utf-8", "replace"))


def _handle(h):
    if not h:
        raise ValueError("the monitor is closed")
    return ctypes.c_void_p(h)


def _num(v):
    return None if math.isnan(v) else v


def api_version():
    return _lib.cnnergy_api_version()


def open(gpus, interval_ms, cpu):  # noqa: A001 (mirrors the extension's name)
    o = _Options()
    _lib.cnnergy_monitor_options_init(ctypes.byref(o))
    if gpus is not None:
        arr = (ctypes.c_uint * max(1, len(gpus)))(*gpus)
        o.gpus, o.gpu_count = arr, len(gpus)
    o.interval_ms, o.cpu = interval_ms, 1 if cpu else 0
    h = ctypes.c_void_p()
    _check(_lib.cnnergy_monitor_open(ctypes.byref(o), ctypes.byref(h)))
    return h.value


def close(h):
    _lib.cnnergy_monitor_close(ctypes.c_void_p(h))


def start(h):
    _check(_lib.cnnergy_monitor_start(_handle(h)))


def stop(h):
    _check(_lib.cnnergy_monitor_stop(_handle(h)))


def running(h):
    return _lib.cnnergy_monitor_running(_handle(h)) != 0


def info(h):
    m = _handle(h)
    gpus = []
    for i in range(_lib.cnnergy_monitor_gpu_count(m)):
        g = _GpuInfo()
        _check(_lib.cnnergy_monitor_gpu_info(m, i, ctypes.byref(g)))
        gpus.append((g.index, g.uuid.decode(), g.name.decode(), g.has_energy_counter != 0))
    return {"gpus": gpus, "has_cpu": _lib.cnnergy_monitor_has_cpu(m) != 0,
            "sensor_period_ms": _lib.cnnergy_monitor_sensor_period_ms(m),
            "interval_ms": _lib.cnnergy_monitor_interval_ms(m)}


def settle_check(h, since_ns, window_s, max_temp_slope, max_power_slope):
    c = _SettleCheck()
    _check(_lib.cnnergy_monitor_settle_check(_handle(h), since_ns, window_s, max_temp_slope,
                                             max_power_slope, ctypes.byref(c)))
    nan_none = lambda v: None if v != v else v  # noqa: E731
    return {"settled": c.settled != 0, "samples": c.samples,
            "temp_slope_c_per_s": nan_none(c.temp_slope_c_per_s),
            "power_slope_per_s": nan_none(c.power_slope_per_s), "reason": c.reason.decode()}


def export(h, port, jsonl):
    bound = ctypes.c_uint()
    path = None if jsonl is None else os.fsencode(jsonl)
    _check(_lib.cnnergy_monitor_export(_handle(h), port, path, ctypes.byref(bound)))
    return bound.value


def begin(h, name):
    wid = _u64()
    _check(_held.cnnergy_window_begin(_handle(h), name.encode(), ctypes.byref(wid)))
    return wid.value


def end(h, name):
    wid = _u64()
    _check(_held.cnnergy_window_end(_handle(h), name.encode(), ctypes.byref(wid)))
    return wid.value


def begin_at(h, name, t_ns):
    wid = _u64()
    _check(_held.cnnergy_window_begin_at(_handle(h), name.encode(), t_ns, ctypes.byref(wid)))
    return wid.value


def end_at(h, name, t_ns):
    wid = _u64()
    _check(_held.cnnergy_window_end_at(_handle(h), name.encode(), t_ns, ctypes.byref(wid)))
    return wid.value


def now_ns():
    return _held.cnnergy_now_ns()


def window_count(h):
    return _held.cnnergy_monitor_window_count(_handle(h))


def result(h, wid, timeout_ms):
    m = _Measurement()
    fn = _held.cnnergy_window_result if timeout_ms == 0 else _lib.cnnergy_window_result
    status = fn(_handle(h), wid, timeout_ms, ctypes.byref(m))
    if status == NOT_READY:
        return None
    _check(status)
    if m.struct_size != ctypes.sizeof(_Measurement):
        raise ImportError("libcnnergy's cnnergy_measurement has %d bytes, this package expects %d"
                          % (m.struct_size, ctypes.sizeof(_Measurement)))
    gpus = [{"gpu": g.gpu_index, "source": _SOURCES.get(g.source, "none"),
             "energy_j": _num(g.energy_j), "uncertainty_j": _num(g.uncertainty_j),
             "avg_power_w": _num(g.avg_power_w), "peak_power_w": _num(g.peak_power_w),
             "samples": g.samples} for g in m.gpus[:m.gpu_count]]
    return {"name": m.name.decode(), "time_s": m.time_s, "begin_s": m.begin_s, "end_s": m.end_s,
            "energy_j": _num(m.energy_j), "uncertainty_j": _num(m.uncertainty_j),
            "avg_power_w": _num(m.avg_power_w), "peak_power_w": _num(m.peak_power_w),
            "source": _SOURCES.get(m.source, "none"), "cpu_energy_j": _num(m.cpu_energy_j),
            "below_sensor_period": m.below_sensor_period != 0,
            "sensor_period_ms": m.sensor_period_ms, "gpus": gpus}


def discard(h, wid):
    _check(_held.cnnergy_window_discard(_handle(h), wid))


def power_limit_set(gpu, watts):
    lease = _u64()
    _check(_lib.cnnergy_power_limit_set(gpu, watts, ctypes.byref(lease)))
    return lease.value


def sm_clocks_lock(gpu, lo, hi):
    lease = _u64()
    _check(_lib.cnnergy_sm_clocks_lock(gpu, lo, hi, ctypes.byref(lease)))
    return lease.value


def memory_clock_set(gpu, mhz):
    lease = _u64()
    _check(_lib.cnnergy_memory_clock_set(gpu, mhz, ctypes.byref(lease)))
    return lease.value


def gpu_knob_info(gpu):
    k = _KnobInfo()
    _lib.cnnergy_gpu_knob_info_init(ctypes.byref(k))
    _check(_lib.cnnergy_gpu_knob_info_get(gpu, ctypes.byref(k)))
    text = lambda b: b.decode("utf-8", "replace")  # noqa: E731
    return {"index": k.index, "name": text(k.name), "uuid": text(k.uuid),
            "driver_version": text(k.driver_version),
            "power_limit_min_w": _num(k.power_limit_min_w),
            "power_limit_max_w": _num(k.power_limit_max_w),
            "power_limit_default_w": _num(k.power_limit_default_w),
            "power_limit_current_w": _num(k.power_limit_current_w),
            "sm_clocks_mhz": list(k.sm_clocks_mhz[:k.sm_clock_count]),
            "mem_clocks_mhz": list(k.mem_clocks_mhz[:k.mem_clock_count])}


def knob_release(lease):
    _check(_lib.cnnergy_knob_release(lease))


def knob_restore_all():
    _check(_lib.cnnergy_knob_restore_all())


def knob_active():
    return _lib.cnnergy_knob_active()
