"""cnnergy for PyTorch Lightning: per-epoch and per-step energy through the trainer's own loggers
(TensorBoard, CSV, ... whichever the user configured), optionally driving an optimizer.

    from cnnergy.integrations.lightning import EnergyCallback
    trainer = L.Trainer(callbacks=[EnergyCallback(optimizer=cnnergy.PowerLimitOptimizer)])

Imports Lightning (the `lightning` package, else `pytorch_lightning`) when this module is imported;
`import cnnergy` alone never does."""
try:
    import lightning.pytorch as _pl
except ImportError:
    try:
        import pytorch_lightning as _pl
    except ImportError as e:
        raise ImportError("cnnergy.integrations.lightning needs PyTorch Lightning: "
                          "pip install lightning (or pytorch_lightning)") from e

from ._core import EnergyLog


def _gpu_of(trainer):
    dev = getattr(trainer.strategy, "root_device", None)
    return [dev.index or 0] if dev is not None and dev.type == "cuda" else None


class EnergyCallback(_pl.Callback):
    """Logs energy/epoch_j, energy/epoch_time_s, energy/epoch_power_w (every epoch) and
    energy/step_j, energy/step_power_w (per step, averaged over blocks of log_every_n_steps) to
    trainer.loggers. monitor: a cnnergy.Monitor (default: one on this rank's GPU). optimizer: an
    optimizer, or a class/function of the monitor making one (e.g. cnnergy.PowerLimitOptimizer or
    functools.partial(cnnergy.ClockOptimizer, objective="edp", dry_run=True))."""

    def __init__(self, monitor=None, optimizer=None, log_every_n_steps=50, gpus=None):
        super().__init__()
        self._args = dict(monitor=monitor, optimizer=optimizer, log_every_n_steps=log_every_n_steps,
                          gpus=gpus)
        self.log = None

    def on_train_start(self, trainer, pl_module):
        args = dict(self._args)
        if args["gpus"] is None and args["monitor"] is None:
            args["gpus"] = _gpu_of(trainer)
        self.log = EnergyLog(**args)
        self.log.train_begin()

    def on_train_epoch_start(self, trainer, pl_module):
        self.log.epoch_begin(trainer.current_epoch)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.log.step_begin()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self._emit(trainer, self.log.step_end(trainer.global_step))

    def on_train_epoch_end(self, trainer, pl_module):
        self._emit(trainer, self.log.epoch_end(trainer.current_epoch))

    def on_train_end(self, trainer, pl_module):
        if self.log is not None:
            self._emit(trainer, self.log.train_end())

    def on_exception(self, trainer, pl_module, exception):
        if self.log is not None:
            self.log.train_end()
            self.log = None

    @staticmethod
    def _emit(trainer, items):
        if not items or trainer.global_rank != 0:
            return
        for index, metrics in items:
            step = trainer.global_step
            if "energy/epoch_j" in metrics:
                metrics = dict(metrics, epoch=index)
            for logger in trainer.loggers:
                logger.log_metrics(metrics, step=step)
