"""PyTorch Lightning under Ray Train: a ``LightningModule`` on scikit-learn's digits.

The loop is the one Ray Train's Lightning guide describes: a ``lightning.pytorch.Trainer`` with
``RayDDPStrategy`` (DDP over the process group Ray Train set up), ``RayLightningEnvironment``
(ranks and world size from Ray Train), ``RayTrainReportCallback`` (at the end of every training
epoch, ``trainer.callback_metrics`` and a Lightning checkpoint go to ``ray.train.report``) and
``prepare_trainer``. A restarted worker group or a new attempt resumes from
``ray.train.get_checkpoint()`` through ``fit(ckpt_path=...)``: weights, optimizer, epoch and step.

The report's ``epoch`` is ``trainer.current_epoch``, the 0-based index of the epoch that just
ended, which is what the runtime reads as progress. Validation runs before the epoch's end, so
every report carries that epoch's ``val_loss`` and ``val_accuracy`` beside ``train_loss``.

Config keys: ``epochs``, ``lr``, ``batch_size``, ``hidden``, ``seed``. Needs the packages of
``examples/requirements-frameworks.txt``.
"""

from __future__ import annotations

import os
import shutil
from typing import Any

import lightning.pytorch as pl
import ray.train
import torch
from ray.train.lightning import (
    RayDDPStrategy,
    RayLightningEnvironment,
    RayTrainReportCallback,
    prepare_trainer,
)
from torch import nn
from torch.utils.data import DataLoader

from examples.digits.train import make_data, make_model


class DigitsClassifier(pl.LightningModule):
    def __init__(self, hidden: int, lr: float) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.model = make_model(hidden)
        self.loss_fn = nn.CrossEntropyLoss()
        self.lr = lr

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], _: int) -> torch.Tensor:
        x, y = batch
        loss = self.loss_fn(self.model(x), y)
        self.log("train_loss", loss, on_step=False, on_epoch=True, sync_dist=True)
        return loss

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], _: int) -> None:
        x, y = batch
        logits = self.model(x)
        self.log("val_loss", self.loss_fn(logits, y), sync_dist=True)
        accuracy = (logits.argmax(dim=1) == y).float().mean()
        self.log("val_accuracy", accuracy, sync_dist=True)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)


def train_loop_per_worker(config: dict[str, Any]) -> None:
    seed = int(config.get("seed", 0))
    batch_size = int(config.get("batch_size", 64))
    pl.seed_everything(seed, workers=True, verbose=False)
    torch.set_num_threads(1)

    train_set, val_set = make_data(seed)
    # The DDP strategy adds the distributed sampler to these loaders itself.
    train_loader = DataLoader(train_set, batch_size=batch_size, shuffle=True)
    val_loader = DataLoader(val_set, batch_size=256)
    model = DigitsClassifier(int(config.get("hidden", 128)), float(config.get("lr", 0.05)))

    report = RayTrainReportCallback()
    trainer = pl.Trainer(
        max_epochs=int(config.get("epochs", 5)),
        accelerator="cpu",
        devices="auto",
        strategy=RayDDPStrategy(),
        plugins=[RayLightningEnvironment()],
        callbacks=[report],
        # RayTrainReportCallback writes the checkpoints, Ray Train keeps them.
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        logger=False,
    )
    trainer = prepare_trainer(trainer)

    try:
        checkpoint = ray.train.get_checkpoint()
        if checkpoint is None:
            trainer.fit(model, train_loader, val_loader)
            return
        with checkpoint.as_directory() as d:
            path = os.path.join(d, RayTrainReportCallback.CHECKPOINT_NAME)
            trainer.fit(model, train_loader, val_loader, ckpt_path=path)
    finally:
        # The callback saves each epoch under a scratch directory of this worker and reports it
        # (Ray Train copies it into the run's storage); it removes each epoch's directory but
        # leaves their parent behind.
        shutil.rmtree(report.tmpdir_prefix, ignore_errors=True)
