#!/usr/bin/env python3
"""PyTorch Lightning with cnnergy's callback: per-epoch and per-step joules in Lightning's own
loggers (CSV here; TensorBoard where it is installed), optionally with the power-limit optimizer.

    python3 -m pip install . lightning   # cnnergy from the repository, Lightning from PyPI
    python3 examples/lightning_energy.py --epochs 2                   # measure only
    python3 examples/lightning_energy.py --optimize --dry-run         # what the optimizer would do

The metrics (energy/epoch_j, energy/epoch_power_w, energy/step_j ...) land in lightning_logs/.
"""
import argparse
import functools

import lightning as L
import torch
import torchvision

import cnnergy
from cnnergy.integrations.lightning import EnergyCallback


class ResNet(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torchvision.models.resnet50()

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self.net(x), y)
        self.log("loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--steps-per-epoch", type=int, default=200)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--optimize", action="store_true", help="let cnnergy choose the power limit")
    p.add_argument("--dry-run", action="store_true", help="the optimizer changes nothing")
    args = p.parse_args()
    data = torch.utils.data.TensorDataset(torch.randn(args.batch * args.steps_per_epoch, 3, 224, 224),
                                          torch.randint(0, 1000, (args.batch * args.steps_per_epoch,)))
    loader = torch.utils.data.DataLoader(data, batch_size=args.batch, num_workers=2)
    optimizer = (functools.partial(cnnergy.PowerLimitOptimizer, objective="energy",
                                   max_slowdown=0.10, job="resnet50-lightning",
                                   batch_size=args.batch, precision="bf16-mixed",
                                   dry_run=args.dry_run) if args.optimize else None)
    trainer = L.Trainer(max_epochs=args.epochs, accelerator="gpu", devices=1,
                        precision="bf16-mixed", logger=L.pytorch.loggers.CSVLogger("lightning_logs"),
                        callbacks=[EnergyCallback(optimizer=optimizer, log_every_n_steps=50)])
    trainer.fit(ResNet(), loader)


if __name__ == "__main__":
    main()
