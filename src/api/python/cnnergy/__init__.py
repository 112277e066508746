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

begin_window/end_window only take a timestamp on the calling thread (a few microseconds, no call
into the library): a background thread of the module registers the stamped windows with the
library every 50 ms, whose sampler thread reads the GPU energy counter (slow: ~4 ms on real GPUs)
and places each window's edges on it by interpolation (see docs/python.md). A window that ends
and is dropped unread before it was registered never reaches the library at all. The backend is the pybind11 extension where it was built for
this Python, otherwise ctypes over libcnnergy.so (same C API, same results).
"""
import collections
import contextlib
import functools
import os
import threading
import time
import weakref

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

__version__ = "1.3.0"
__all__ = ["Monitor", "Measurement", "GpuMeasurement", "power_limit", "sm_clocks", "api_version",
           "CnnergyError", "InvalidArgument", "DataError", "NotSupported", "PermissionDenied",
           "DeviceError", "NotReady", "backend_name", "active_knob_changes", "memory_clock",
           "gpu_knob_info", "PowerLimitOptimizer", "ClockOptimizer"]


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

    __slots__ = ("_monitor", "name", "_id", "_data", "_span", "__weakref__")

    def __init__(self, monitor, name=None, window_id=None, span=None):
        self._monitor, self.name, self._id = monitor, name, window_id
        self._data = None
        self._span = span  # (begin, end) stamps in ns, known at end_window (the library's clock)

    def _get(self, timeout_ms=-1.0):
        if self._data is None:
            monitor = self._monitor
            if self._id is None:
                monitor._drain()  # registers the stamped windows, this one included
            if self._id is None:
                raise monitor._drain_error or CnnergyError(
                    "window '%s' was not registered with the library" % self.name)
            with monitor._result_lock:
                if self._data is None:
                    d = _backend.result(monitor._handle, self._id, timeout_ms)
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

    time_s = property(lambda self: (self._span[1] - self._span[0]) / 1e9 if self._span
                      else self._get()["time_s"], doc="elapsed time (s); known at once")
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

    # No __del__: an unread window that was registered is discarded by the monitor's background
    # thread once its Measurement is gone (see Monitor._drain), off the training thread.


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


_NAME_MAX = 128  # CNNERGY_NAME_MAX: names have 1 to 127 bytes
_DRAIN_PERIOD_S = 0.05
_SPARE_MEASUREMENTS = 256  # made ahead per drain: more windows than this per 50 ms allocate
_monotonic_ns = time.monotonic_ns


def _clock_agrees():
    """Whether time.monotonic_ns() reads the library's clock (CLOCK_MONOTONIC on Linux): then
    windows are stamped in Python and registered later; otherwise every call goes to the library."""
    for _ in range(3):
        a = _monotonic_ns()
        c = _backend.now_ns()
        b = _monotonic_ns()
        if a - 1000 <= c <= b + 1000:
            return True
    return False


def _drain_loop(monitor_ref, stop):
    """The background registration of a Monitor's windows; holds the Monitor only weakly."""
    while not stop.wait(_DRAIN_PERIOD_S):
        m = monitor_ref()
        if m is None:
            return
        try:
            m._drain()
        except Exception:  # noqa: BLE001 (a closing monitor; errors are kept by _drain itself)
            pass
        del m


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
        # Windows: stamped on the caller's thread, registered by _drain (a background thread every
        # _DRAIN_PERIOD_S, or a reader that needs its Measurement now).
        self._open = {}                      # name -> begin stamp (ns), Python's view
        self._names_ok = set()               # names already checked
        self._queue = collections.deque()    # (name, t_ns, None: begin | weakref: end)
        self._registered = []                # (weakref to Measurement, window id), unread
        self._spares = []                    # (Measurement, weakref) made ahead for end_window
        self._refill_spares()
        self._drain_lock = threading.Lock()
        self._result_lock = threading.Lock()
        self._drain_error = None
        self._running = _backend.running(self._handle)
        self._stamping = _clock_agrees()      # else every call goes to the library at once
        self._stop_drainer = threading.Event()
        self._drainer = threading.Thread(target=_drain_loop, name="cnnergy-windows", daemon=True,
                                         args=(weakref.ref(self), self._stop_drainer))
        self._drainer.start()

    @property
    def metrics_url(self):
        """http://127.0.0.1:PORT/metrics when serving metrics, else None."""
        if self.prometheus_port is None:
            return None
        return "http://127.0.0.1:%d/metrics" % self.prometheus_port

    def begin_window(self, name: str) -> None:
        """Opens the window `name` (a name is open once at a time). Only stamps the time."""
        t = _monotonic_ns()
        if self._drain_error is not None:
            self._raise_drain_error()
        if name not in self._names_ok:
            self._check_name(name)
        if name in self._open:
            raise InvalidArgument("window '%s' is already open" % name)
        if not self._running:
            raise InvalidArgument("the monitor is stopped: start it before beginning windows")
        if self._stamping:
            self._open[name] = t
            self._queue.append((name, t, None))
        else:
            _backend.begin(self._handle, name)
            self._open[name] = t

    def end_window(self, name: str, wait: bool = False) -> Measurement:
        """Closes the window and returns its Measurement (numbers resolve on first read; with
        wait=True, before returning; time_s is known at once)."""
        t = _monotonic_ns()
        if self._drain_error is not None:
            self._raise_drain_error()
        b = self._open.pop(name, None)
        if b is None:
            raise InvalidArgument("window '%s' was never begun (or has already ended)" % name)
        if self._stamping:
            # A Measurement made ahead by the background thread (allocating one on a cold cache
            # right after a training step cost microseconds): fill in three slots and queue it.
            try:
                m, ref = self._spares.pop()
            except IndexError:
                m = Measurement(None)
                ref = weakref.ref(m)
            m._monitor = self  # spares hold no monitor: no reference cycle
            m.name = name
            m._span = (b, t)
            self._queue.append((name, t, ref))
        else:
            m = Measurement(self, name, _backend.end(self._handle, name))
            self._registered.append((weakref.ref(m), m._id))
        return m.wait() if wait else m

    def _check_name(self, name):
        if not isinstance(name, str):
            raise InvalidArgument("a window name is a str, not %s" % type(name).__name__)
        n = len(name.encode())
        if n == 0 or n >= _NAME_MAX:
            raise InvalidArgument("window name must have 1 to %d bytes" % (_NAME_MAX - 1))
        self._names_ok.add(name)

    def _drain(self):
        """Registers the stamped begins and ends with the library, in order, and discards the
        registered windows whose Measurement is gone unread. Runs on the background thread and
        on a reader that needs its numbers now; the training thread never waits for it."""
        with self._drain_lock:
            h = self._handle
            if not h:
                return
            items = []
            while self._queue:
                items.append(self._queue.popleft())
            begun = {}  # name -> begin stamp not yet registered
            for name, t, ref in items:
                try:
                    if ref is None:
                        begun[name] = t
                        continue
                    m = ref()
                    if name in begun:
                        bt = begun.pop(name)
                        if m is None:
                            continue  # begun and ended unread since the last drain: nothing to do
                        _backend.begin_at(h, name, bt)
                    wid = _backend.end_at(h, name, t)
                    if m is None:
                        _backend.discard(h, wid)
                    else:
                        m._id = wid
                        self._registered.append((ref, wid))
                except CnnergyError as e:  # surfaces at the next call (and on the Measurement)
                    if self._drain_error is None:
                        self._drain_error = e
            for name, bt in begun.items():
                try:
                    _backend.begin_at(h, name, bt)
                except CnnergyError as e:
                    if self._drain_error is None:
                        self._drain_error = e
            kept = []
            for ref, wid in self._registered:
                m = ref()
                if m is None:
                    try:
                        _backend.discard(h, wid)
                    except CnnergyError:
                        pass  # already collected (read through another path) or a restarted monitor
                elif m._data is None:
                    kept.append((ref, wid))
            self._registered = kept
            self._refill_spares()

    def _refill_spares(self):
        while len(self._spares) < _SPARE_MEASUREMENTS:
            m = Measurement(None)
            self._spares.append((m, weakref.ref(m)))

    def _raise_drain_error(self):
        e, self._drain_error = self._drain_error, None
        if e is not None:
            raise e

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

    def settle_check(self, since_ns: int, window_s: float = 0.0, max_temp_slope_c_per_s: float = 0.0,
                     max_power_slope_per_s: float = 0.0) -> dict:
        """Whether temperature and power have settled since `since_ns` (time.monotonic_ns(): a
        setting change): the steady-state rule of `cnnergy sweep --settle-s` on this monitor's own
        samples (over the last window_s seconds, at least five samples, the temperature's slope at
        most 0.1 C/s and the power's at most 1 % of its mean per second; 0 keeps those defaults).
        Reads only: keep the workload running between checks. Returns {"settled", "samples",
        "temp_slope_c_per_s", "power_slope_per_s", "reason"}."""
        return _backend.settle_check(self._handle, int(since_ns), float(window_s),
                                     float(max_temp_slope_c_per_s), float(max_power_slope_per_s))

    def start(self) -> None:
        _backend.start(self._handle)
        self._running = True

    def stop(self) -> None:
        self._drain()
        _backend.stop(self._handle)
        self._running = False

    @property
    def running(self) -> bool:
        return _backend.running(self._handle)

    def close(self) -> None:
        """Stops the sampler and frees the monitor (unread windows are lost)."""
        stop = getattr(self, "_stop_drainer", None)
        if stop is not None:
            stop.set()
            if self._drainer is not threading.current_thread():
                self._drainer.join()
            if self._handle:
                self._drain()  # exporters and the journal of windows see every ended window
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


@contextlib.contextmanager
def memory_clock(mhz: int, gpu: int = 0):
    """Runs the body with GPU `gpu`'s memory clock at `mhz` (a supported memory clock); restored
    like power_limit."""
    lease = _backend.memory_clock_set(int(gpu), int(mhz))
    try:
        yield
    finally:
        _backend.knob_release(lease)


def gpu_knob_info(gpu: int = 0) -> dict:
    """What can be changed on GPU `gpu`: name, uuid, driver_version, power_limit_{min,max,default,
    current}_w (None when unknown), sm_clocks_mhz and mem_clocks_mhz (supported, descending)."""
    return _backend.gpu_knob_info(int(gpu))


def active_knob_changes() -> int:
    """How many power_limit / sm_clocks scopes are in force in this process."""
    return _backend.knob_active()


from .optimizer import ClockOptimizer, PowerLimitOptimizer  # noqa: E402 (needs Monitor above)
