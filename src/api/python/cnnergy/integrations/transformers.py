"""cnnergy for the Hugging Face Trainer: per-epoch and per-step energy in the Trainer's logs (so in
TensorBoard, W&B, ... where the user reports to), optionally driving an optimizer.

    from cnnergy.integrations.transformers import EnergyCallback
    trainer = Trainer(model, args, ...)
    EnergyCallback(optimizer=cnnergy.PowerLimitOptimizer).attach(trainer)

attach() puts the callback first, so the reporting callbacks (TensorBoard, W&B, ...) see its
metrics in the same log entry; with trainer.add_callback(cb) they reach trainer.state.log_history
(and the callbacks after this one) only. Imports transformers when this module is imported;
`import cnnergy` alone never does."""
try:
    from transformers import TrainerCallback as _TrainerCallback
except ImportError as e:
    raise ImportError("cnnergy.integrations.transformers needs Hugging Face transformers: "
                      "pip install transformers") from e

from ._core import EnergyLog


class EnergyCallback(_TrainerCallback):
    """monitor: a cnnergy.Monitor (default: one on this process's GPU). optimizer: an optimizer, or
    a class/function of the monitor making one. Metrics: energy/epoch_j, energy/epoch_time_s,
    energy/epoch_power_w, energy/step_j, energy/step_power_w."""

    def __init__(self, monitor=None, optimizer=None, log_every_n_steps=50, gpus=None):
        self._args = dict(monitor=monitor, optimizer=optimizer, log_every_n_steps=log_every_n_steps,
                          gpus=gpus)
        self.log = None
        self.epochs = []  # after training: every epoch's window (begin_s, end_s, energy_j)
        self._unlogged = {}

    def attach(self, trainer):
        trainer.callback_handler.callbacks.insert(0, self)
        return self

    def on_train_begin(self, args, state, control, **kwargs):
        a = dict(self._args)
        if a["gpus"] is None and a["monitor"] is None:
            dev = getattr(args, "device", None)
            a["gpus"] = [dev.index or 0] if dev is not None and dev.type == "cuda" else None
        self.log = EnergyLog(**a)
        self.log.train_begin()

    def on_epoch_begin(self, args, state, control, **kwargs):
        self.log.epoch_begin(int(state.epoch or 0))

    def on_step_begin(self, args, state, control, **kwargs):
        self.log.step_begin()

    def on_step_end(self, args, state, control, **kwargs):
        self._keep(state, self.log.step_end(state.global_step))

    def on_epoch_end(self, args, state, control, **kwargs):
        self._keep(state, self.log.epoch_end(int(round(state.epoch or 0))))
        control.should_log = True  # the epoch's joules go out with this epoch's log entry

    def on_train_end(self, args, state, control, **kwargs):
        if self.log is not None:
            self._keep(state, self.log.train_end())
            self.epochs = self.log.epochs
            self.log = None
            if self._unlogged and state.is_world_process_zero:
                state.log_history.append(dict(self._unlogged, step=state.global_step))
                self._unlogged = {}

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs is not None and self._unlogged and state.is_world_process_zero:
            logs.update(self._unlogged)  # seen by the reporting callbacks after this one
            last = state.log_history[-1] if state.log_history else None
            if last is not None and last.get("step") == state.global_step:
                last.update(self._unlogged)  # the Trainer recorded its copy before on_log
            self._unlogged = {}

    def _keep(self, state, items):
        for _, metrics in items:
            self._unlogged.update(metrics)
