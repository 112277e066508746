"""What the framework callbacks share: per-epoch and per-block-of-steps energy windows on a
cnnergy.Monitor, read without blocking the training (a window's numbers are ready about one
sensor period after it ends), and an optimizer driven from the same step hooks.

    log = EnergyLog(gpus=[0], optimizer=lambda monitor: cnnergy.PowerLimitOptimizer(monitor))
    log.train_begin()
    for epoch ...:
        log.epoch_begin(epoch)
        for step ...:
            log.step_begin(); train_step(); out = log.step_end(global_step)  # dicts to log
        out = log.epoch_end(epoch)
    log.train_end()

Metric names (the same in every framework's logger): energy/step_j, energy/step_power_w,
energy/epoch_j, energy/epoch_time_s, energy/epoch_power_w, energy/epoch_uncertainty_j, and
energy/epoch_cpu_j where RAPL is readable."""
import itertools
import sys
import time

_PREFIX = "cnnergy-log"
_instances = itertools.count(1)  # window names stay unique however many logs share a monitor


def _sync():
    """Waits for queued GPU work (where torch has CUDA up), so an epoch's window holds its work."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


class EnergyLog:
    def __init__(self, monitor=None, gpus=None, optimizer=None, log_every_n_steps=50,
                 epoch_timeout_s=5.0):
        """monitor: a cnnergy.Monitor (None: one is opened at train_begin over `gpus`, and closed
        at train_end). optimizer: a PowerLimitOptimizer/ClockOptimizer, or a function of the
        monitor that makes one (called at train_begin). log_every_n_steps: steps per step window
        (0: no step windows); choose it so that a window spans several sensor periods."""
        if log_every_n_steps < 0:
            raise ValueError("log_every_n_steps must be >= 0")
        self.monitor, self._own_monitor = monitor, monitor is None
        self.gpus = gpus
        self.optimizer = optimizer
        self.every = int(log_every_n_steps)
        self._instance = next(_instances)
        self.epoch_timeout_s = float(epoch_timeout_s)
        self._steps_in_block = 0
        self._block_open = False
        self._block_first_step = 0
        self._pending = []  # (step, steps, Measurement) of ended step windows
        self._epoch = None
        self.history = []   # every dict handed out, in order
        self.epochs = []    # {epoch, begin_s, end_s, time_s, energy_j} (steady clock, s)

    def train_begin(self):
        import cnnergy
        if self.monitor is None:
            self.monitor = cnnergy.Monitor(gpus=self.gpus)
        if self.optimizer is not None and not hasattr(self.optimizer, "on_step_begin"):
            self.optimizer = self.optimizer(self.monitor)

    def epoch_begin(self, epoch):
        if self._epoch is not None:  # an epoch hook missed: close it first
            self.monitor.end_window(self._epoch)
        self._epoch = "%s-epoch-%d-%d" % (_PREFIX, self._instance, epoch)
        _sync()
        self.monitor.begin_window(self._epoch)

    def step_begin(self):
        if self.optimizer is not None:
            self.optimizer.on_step_begin()
        if self.every and not self._block_open:
            self.monitor.begin_window(self._block_name())
            self._block_open = True

    def step_end(self, step):
        """Returns a list of (step, metrics dict) whose numbers became ready (usually empty)."""
        if self.optimizer is not None:
            self.optimizer.on_step_end()
        if self.every:
            if self._steps_in_block == 0:
                self._block_first_step = step
            self._steps_in_block += 1
            if self._steps_in_block >= self.every:
                m = self.monitor.end_window(self._block_name())
                self._pending.append((step, self._steps_in_block, m, time.monotonic()))
                self._block_open, self._steps_in_block = False, 0
        return self._ready(wait=False)

    def _block_name(self):
        return "%s-steps-%d" % (_PREFIX, self._instance)

    def _ready(self, wait):
        out = []
        period_s = self.monitor.sensor_period_ms / 1000.0
        while self._pending:
            step, n, m, ended = self._pending[0]
            if not wait and (time.monotonic() - ended < period_s or not m.ready):
                break
            self._pending.pop(0)
            if wait:
                m.wait(self.epoch_timeout_s)
            d = {"energy/step_j": None if m.energy_j is None else m.energy_j / n,
                 "energy/step_power_w": m.avg_power_w}
            out.append((step, {k: v for k, v in d.items() if v is not None}))
        self.history.extend(out)
        return out

    def epoch_end(self, epoch):
        """Closes the epoch's window and waits for its numbers (about one sensor period): returns
        [(None, metrics)] plus any step windows that became ready."""
        out = []
        if self._epoch is not None:
            _sync()
            m = self.monitor.end_window(self._epoch).wait(self.epoch_timeout_s)
            self._epoch = None
            d = {"energy/epoch_j": m.energy_j, "energy/epoch_time_s": m.time_s,
                 "energy/epoch_power_w": m.avg_power_w,
                 "energy/epoch_uncertainty_j": m.uncertainty_j, "energy/epoch_cpu_j": m.cpu_energy_j}
            out.append((epoch, {k: v for k, v in d.items() if v is not None}))
            self.epochs.append({"epoch": epoch, "begin_s": m.begin_s, "end_s": m.end_s,
                                "time_s": m.time_s, "energy_j": m.energy_j})
            self.history.extend(out)
        return out + self._ready(wait=False)

    def train_end(self):
        """Reads what is left, puts the GPU settings back (the optimizer's) and closes the monitor
        this object opened. Returns the remaining (step, metrics)."""
        out = []
        try:
            if self._block_open:
                self.monitor.end_window(self._block_name())
                self._block_open = False
            if self._epoch is not None:
                out += self.epoch_end(-1)
            out += self._ready(wait=True)
        finally:
            if self.optimizer is not None and hasattr(self.optimizer, "close"):
                self.optimizer.close()
            if self._own_monitor and self.monitor is not None:
                self.monitor.close()
                self.monitor = None
        return out
