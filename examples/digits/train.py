"""A Ray Train loop: a small MLP on scikit-learn's digits (8x8 images, shipped with sklearn).

Written the way any Ray Train user writes one: ``prepare_model`` for DDP, ``prepare_data_loader``
for the distributed sampler, ``ray.train.report`` every epoch with a checkpoint from rank 0 only,
and resume from ``ray.train.get_checkpoint()``. Config keys: ``epochs``, ``lr``, ``batch_size``,
``hidden``, ``seed``. With a ``train`` dataset in the TrainJob (``spec.datasets.train``: the
Parquet table of examples/digits/data.py) each worker trains on its Ray Data shard through
``iter_torch_batches`` instead of the in-memory loader. ``fail_at_epoch`` + ``fail_marker``
make one worker die once at that epoch (a test of recovery: the marker file records that it
happened), after ``fail_after_fraction`` of the epoch's batches (default 0: before the first
one).
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

import numpy as np
import ray.train
import torch
from ray.train import Checkpoint
from ray.train.torch import prepare_data_loader, prepare_model
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def make_data(seed: int) -> tuple[TensorDataset, TensorDataset]:
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=0.25, random_state=seed, stratify=y)
    return (
        TensorDataset(torch.from_numpy(x_tr), torch.from_numpy(y_tr).long()),
        TensorDataset(torch.from_numpy(x_te), torch.from_numpy(y_te).long()),
    )


def make_model(hidden: int) -> nn.Module:
    return nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, 10))


def train_loop_per_worker(config: dict[str, Any]) -> None:
    epochs = int(config.get("epochs", 5))
    lr = float(config.get("lr", 0.05))
    batch_size = int(config.get("batch_size", 64))
    hidden = int(config.get("hidden", 128))
    seed = int(config.get("seed", 0))
    torch.manual_seed(seed)
    torch.set_num_threads(1)

    train_set, test_set = make_data(seed)
    shard = _train_shard()
    train_loader: Any = None
    if shard is None:
        train_loader = prepare_data_loader(
            DataLoader(train_set, batch_size=batch_size, shuffle=True)
        )
    test_loader = DataLoader(test_set, batch_size=256)

    model = prepare_model(make_model(hidden))
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    start_epoch = 0
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as d:
            state = torch.load(os.path.join(d, "state.pt"), weights_only=True)
        # prepare_model wraps the model in DDP only when there is more than one worker.
        target = model.module if hasattr(model, "module") else model
        target.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start_epoch = int(state["epoch"]) + 1

    rank = ray.train.get_context().get_world_rank()
    for epoch in range(start_epoch, epochs):
        if train_loader is not None and ray.train.get_context().get_world_size() > 1:
            train_loader.sampler.set_epoch(epoch)
        model.train()
        total, count = 0.0, 0
        batches = _shard_batches(shard, batch_size) if shard is not None else train_loader
        size = len(train_loader) if train_loader is not None else 0
        for batch, (xb, yb) in enumerate(batches):
            _maybe_fail(config, epoch, batch / size if size else 0.0, rank)
            optimizer.zero_grad()
            loss = loss_fn(model(xb), yb)
            loss.backward()
            optimizer.step()
            total += loss.item() * len(yb)
            count += len(yb)

        model.eval()
        correct = 0
        with torch.no_grad():
            for xb, yb in test_loader:
                correct += int((model(xb).argmax(dim=1) == yb).sum())
        metrics = {
            "epoch": epoch,
            "loss": total / max(count, 1),
            "accuracy": correct / len(test_set),
            "start_epoch": start_epoch,
            "rows": count,  # the rows this worker trained on in the epoch
        }
        if rank == 0:
            with tempfile.TemporaryDirectory() as d:
                target = model.module if hasattr(model, "module") else model
                torch.save(
                    {
                        "model": target.state_dict(),
                        "optimizer": optimizer.state_dict(),
                        "epoch": epoch,
                    },
                    os.path.join(d, "state.pt"),
                )
                ray.train.report(metrics, checkpoint=Checkpoint.from_directory(d))
        else:
            ray.train.report(metrics)


def _train_shard() -> Any:
    """This worker's shard of the ``train`` dataset, or None when the job has no datasets."""
    try:
        return ray.train.get_dataset_shard("train")
    except Exception:  # KeyError under Ray Train, AssertionError under torchrun (local mode)
        return None


def _shard_batches(shard: Any, batch_size: int) -> Any:
    """(pixels, labels) batches of the shard, as the in-memory loader yields them."""
    from examples.digits.data import PIXELS

    for batch in shard.iter_torch_batches(batch_size=batch_size, dtypes=None):
        xb = torch.stack([batch[name].float() for name in PIXELS], dim=1)
        yield xb, batch["label"].long()


def _maybe_fail(config: dict[str, Any], epoch: int, done: float, rank: int) -> None:
    """Die once (the process, not just the function) on the last rank at ``fail_at_epoch``, once
    ``done`` (the fraction of the epoch's batches already trained) reaches ``fail_after_fraction``.
    """
    fail_at = config.get("fail_at_epoch")
    marker = config.get("fail_marker")
    if fail_at is None or marker is None or epoch != int(fail_at):
        return
    if done < float(config.get("fail_after_fraction", 0.0)):
        return
    if rank != ray.train.get_context().get_world_size() - 1 or os.path.exists(marker):
        return
    with open(marker, "w") as f:
        f.write(str(epoch))
    os._exit(1)
