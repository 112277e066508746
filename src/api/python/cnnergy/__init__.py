"""cnnergy: measure the time and energy of named windows inside your own training code, and run
code under a GPU power limit or locked SM clocks that are always put back.

    import cnnergy
    monitor = cnnergy.Monitor(gpus=[0])
    monitor.begin_window("epoch")
    ...
    m = monitor.end_window("epoch")     # returns at once
    print(m.time_s, m.energy_j)         # the energy is ready ~1 sensor period after the end

    with monitor.window("forward") as w:
        ...
    print(w.measurement.energy_j)

    with cnnergy.power_limit(250, gpu=0):   # restored on exit, exception, SIGINT/SIGTERM/SIGHUP
        train()

begin_window/end_window only take a timestamp (microseconds); the library's sampler thread reads
the GPU energy counter (slow: ~4 ms on real GPUs) and places each window's edges on it by
interpolation (see docs/python.md). The backend is the pybind11 extension where it was built for
this Python, otherwise ctypes over libcnnergy.so (same C API, same results).
"""
import contextlib
import functools
import os
import threading

from ._errors import (CnnergyError, DataError, DeviceError, InvalidArgument, NotReady,
                      NotSupported, PermissionDenied)

# CNNERGY_PYTHON_BACKEND=ctypes skips the extension (the tests run both backends).
try:
    if os.environ.get("CNNERGY_PYTHON_BACKEND") == "ctypes":
        raise ImportError("ctypes backend asked for")
    from . import _cnnergy_ext as _backend
    backend_name = "pybind11"
except ImportError:
    from . import _ctypes_backend as _backend
    backend_name = "ctypes"

__version__ = "1.0.0"
__all__ = ["Monitor", "Measurement", "GpuMeasurement", "power_limit", "sm_clocks", "api_version",
           "CnnergyError", "InvalidArgument", "DataError", "NotSupported", "PermissionDenied",
           "DeviceError", "NotReady", "backend_name", "active_knob_changes"]


def api_version() -> int:
    """The C API version of the loaded libcnnergy (major * 10000 + minor * 100 + patch)."""
    return _backend.api_version()


class GpuMeasurement:
    """One GPU's share of a window."""

    __slots__ = ("gpu", "source", "energy_j", "uncertainty_j", "avg_power_w", "peak_power_w",
                 "samples")

    def __init__(self, d):
        for k in self.__slots__:
            setattr(self, k, d[k])

    def __repr__(self):
        return ("GpuMeasurement(gpu=%d, energy_j=%s, source=%r, avg_power_w=%s)"
                % (self.gpu, _fmt(self.energy_j), self.source, _fmt(self.avg_power_w)))


def _fmt(v):
    return "None" if v is None else "%.3f" % v


class Measurement:
    """A window's time and energy. end_window returns it at once; the first read of an attribute
    waits until the sampler has covered the window's end (about one sampling interval plus one
    sensor period after it), unless `ready` is already true. Unknown values are None."""

    def __init__(self, monitor, name, window_id):
        self._monitor, self.name, self._id = monitor, name, window_id
        self._data = None
        self._lock = threading.Lock()

    def _get(self, timeout_ms=-1.0):
        with self._lock:
            if self._data is None:
                d = _backend.result(self._monitor._handle, self._id, timeout_ms)
                if d is None:
                    return None
                d["gpus"] = [GpuMeasurement(g) for g in d["gpus"]]
                self._data = d
            return self._data

    @property
    def ready(self) -> bool:
        """True once the numbers are known (never waits)."""
        return self._data is not None or self._get(0.0) is not None

    def wait(self, timeout_s=None):
        """Waits for the numbers (at most timeout_s, then uses the data there is)."""
        self._get(-1.0 if timeout_s is None else max(1.0, timeout_s * 1000.0))
        return self

    time_s = property(lambda self: self._get()["time_s"], doc="elapsed time (s)")
    begin_s = property(lambda self: self._get()["begin_s"], doc="begin, steady clock (s)")
    end_s = property(lambda self: self._get()["end_s"], doc="end, steady clock (s)")
    energy_j = property(lambda self: self._get()["energy_j"], doc="GPU energy, all GPUs (J)")
    uncertainty_j = property(lambda self: self._get()["uncertainty_j"],
                             doc="bound on the GPU energy's error (J)")
    avg_power_w = property(lambda self: self._get()["avg_power_w"], doc="energy / time (W)")
    peak_power_w = property(lambda self: self._get()["peak_power_w"],
                            doc="sum of each GPU's highest sampled power in the window (W)")
    source = property(lambda self: self._get()["source"],
                      doc="'counter', 'integrated_power' or 'none' (the weakest over the GPUs)")
    cpu_energy_j = property(lambda self: self._get()["cpu_energy_j"],
                            doc="CPU package energy from RAPL (J), None where not readable")
    below_sensor_period = property(lambda self: self._get()["below_sensor_period"],
                                   doc="shorter than one sensor update: repeat the work instead")
    sensor_period_ms = property(lambda self: self._get()["sensor_period_ms"])
    gpus = property(lambda self: self._get()["gpus"], doc="per-GPU GpuMeasurement list")

    @property
    def energy_j_per_gpu(self):
        """{gpu index: energy in J (None when unknown)}"""
        return {g.gpu: g.energy_j for g in self.gpus}

    def as_dict(self):
        d = dict(self._get())
        d["gpus"] = [{k: getattr(g, k) for k in GpuMeasurement.__slots__} for g in d["gpus"]]
        return d

    def __repr__(self):
        if self._data is None:
            return "Measurement(%r, pending)" % self.name
        return ("Measurement(%r, time_s=%.4f, energy_j=%s, source=%r, below_sensor_period=%s)"
                % (self.name, self.time_s, _fmt(self.energy_j), self.source,
                   self.below_sensor_period))

    def __del__(self):
        # A window nobody read still costs the sampler a little: forget it.
        try:
            if self._data is None and self._monitor._handle:
                _backend.discard(self._monitor._handle, self._id)
        except Exception:  # noqa: BLE001 (interpreter shutdown, monitor already closed)
            pass


class _Window(contextlib.ContextDecorator):
    """`with monitor.window(name) as w:` ... `w.measurement`; also a decorator."""

    def __init__(self, monitor, name, on_result=None):
        self._monitor, self.name, self._on_result = monitor, name, on_result
        self.measurement = None

    def __enter__(self):
        self._monitor.begin_window(self.name)
        return self

    def __exit__(self, *exc):
        self.measurement = self._monitor.end_window(self.name)
        if self._on_result is not None:
            self._on_result(self.measurement)
        return False


class Monitor:
    """Samples GPUs (NVML indices, default all) and, where RAPL is readable, the CPU packages, on a
    background thread, and measures named windows that may nest and overlap."""

    def __init__(self, gpus=None, interval_ms=0.0, cpu=True, prometheus_port=None, jsonl=None):
        """prometheus_port: serve live metrics and every completed window as OpenMetrics at
        http://127.0.0.1:PORT/metrics (0: a free port, see .prometheus_port); jsonl: a file that
        gets one JSON object per sample and per completed window."""
        self._handle = 0
        self.prometheus_port = None
        if gpus is not None:
            gpus = [int(g) for g in gpus]
        self._handle = _backend.open(gpus, float(interval_ms), bool(cpu))
        if prometheus_port is not None or jsonl is not None:
            try:
                port = _backend.export(self._handle,
                                       -1 if prometheus_port is None else int(prometheus_port),
                                       None if jsonl is None else os.fspath(jsonl))
            except BaseException:
                self.close()
                raise
            if prometheus_port is not None:
                self.prometheus_port = port
        info = _backend.info(self._handle)
        self.gpus = [g[0] for g in info["gpus"]]
        self.gpu_uuids = {g[0]: g[1] for g in info["gpus"]}
        self.gpu_names = {g[0]: g[2] for g in info["gpus"]}
        self.has_cpu = info["has_cpu"]
        self.sensor_period_ms = info["sensor_period_ms"]
        self.interval_ms = info["interval_ms"]

    @property
    def metrics_url(self):
        """http://127.0.0.1:PORT/metrics when serving metrics, else None."""
        if self.prometheus_port is None:
            return None
        return "http://127.0.0.1:%d/metrics" % self.prometheus_port

    def begin_window(self, name: str) -> None:
        """Opens the window `name` (a name is open once at a time). Only stamps the time."""
        _backend.begin(self._handle, name)

    def end_window(self, name: str, wait: bool = False) -> Measurement:
        """Closes the window and returns its Measurement (numbers resolve on first read; with
        wait=True, before returning)."""
        m = Measurement(self, name, _backend.end(self._handle, name))
        return m.wait() if wait else m

    def window(self, name: str, on_result=None) -> _Window:
        """A context manager (and decorator) measuring its body as the window `name`;
        `on_result(measurement)` is called after each window."""
        return _Window(self, name, on_result)

    def measure(self, name=None, on_result=None):
        """A decorator: every call of the function is a window (default name: the function's);
        the last Measurement is in `function.last_measurement`."""
        def wrap(fn):
            label = name or fn.__qualname__

            @functools.wraps(fn)
            def inner(*args, **kwargs):
                with self.window(label) as w:
                    out = fn(*args, **kwargs)
                inner.last_measurement = w.measurement
                if on_result is not None:
                    on_result(w.measurement)
                return out
            inner.last_measurement = None
            return inner
        return wrap

    def start(self) -> None:
        _backend.start(self._handle)

    def stop(self) -> None:
        _backend.stop(self._handle)

    @property
    def running(self) -> bool:
        return _backend.running(self._handle)

    def close(self) -> None:
        """Stops the sampler and frees the monitor (unread windows are lost)."""
        h, self._handle = self._handle, 0
        if h:
            _backend.close(h)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass


@contextlib.contextmanager
def power_limit(watts: float, gpu: int = 0):
    """Runs the body with GPU `gpu`'s power limit at `watts` W, journaled, and puts back the value
    before it on exit, on an exception, on SIGINT/SIGTERM/SIGHUP (which then end the process) and,
    after a crash, through `cnnergy restore` or the next change."""
    lease = _backend.power_limit_set(int(gpu), float(watts))
    try:
        yield
    finally:
        _backend.knob_release(lease)


@contextlib.contextmanager
def sm_clocks(min_mhz: int, max_mhz=None, gpu: int = 0):
    """Runs the body with GPU `gpu`'s SM clock locked to [min_mhz, max_mhz] (default: exactly
    min_mhz; each must be a supported clock); restored like power_limit."""
    lease = _backend.sm_clocks_lock(int(gpu), int(min_mhz),
                                    int(min_mhz if max_mhz is None else max_mhz))
    try:
        yield
    finally:
        _backend.knob_release(lease)


def active_knob_changes() -> int:
    """How many power_limit / sm_clocks scopes are in force in this process."""
    return _backend.knob_active()
