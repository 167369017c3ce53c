"""A Ray Train loop that resumes mid-epoch, at the batch after its last checkpoint.

The checkpoint holds the model, the optimizer and the loop's position: the epoch, the batches of
that epoch already trained and the global step. Each epoch visits the training set in an order
seeded by ``(seed, epoch)``, the same in every process and every run, so a resumed run rebuilds
the epoch's order, skips the batches already trained (by index: nothing is loaded to be thrown
away) and goes on from there. A run stopped or killed in the middle of a long epoch loses at most
``checkpoint_every`` steps, not the epoch.

When a node of the run is about to go (Kubernetes evicts a worker pod, a node is drained: the
pod's preStop hook drains its Ray node, see trainer_runtime/drain.py), Ray Train tells every
rank through ``ray.train.get_preemption_info()``. The loop asks after every step (every
``preemption_check_every`` steps; 0 never asks) and, the first time the answer is not None,
reports a checkpoint at once, marked ``preempted: 1``, and trains on: Ray Train restarts the
worker group from the latest checkpoint when the node's deadline passes, so the steps between
the notice and the deadline are the only ones redone.

Digits from scikit-learn (nothing is downloaded). Config keys: ``epochs``, ``lr``,
``batch_size``, ``hidden``, ``seed``, ``checkpoint_every`` (steps between checkpoints; the end of
every epoch is one too), ``preemption_check_every``, ``step_seconds`` (a pause after each step,
standing in for a heavier model) and ``stop_at_step`` (return after that step's checkpoint: a
run that stopped mid-epoch). Every report carries ``start_epoch`` and ``start_batch``: where
this run began.
"""

from __future__ import annotations

import math
import os
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import ray.train
import torch
from ray.train import Checkpoint
from ray.train.torch import prepare_model
from torch import nn
from torch.utils.data import DataLoader, Sampler

from examples.digits.train import make_data, make_model


class EpochSampler(Sampler[int]):
    """One rank's share of epoch ``epoch``'s seeded order, from batch ``start_batch`` on.

    The order is a permutation seeded by ``(seed, epoch)``, padded by repeating its head to a
    multiple of ``world`` (as ``DistributedSampler`` pads) and dealt out rank by rank.
    """

    def __init__(
        self,
        size: int,
        *,
        seed: int,
        epoch: int,
        rank: int,
        world: int,
        batch_size: int,
        start_batch: int = 0,
    ) -> None:
        self.size, self.seed, self.epoch = size, seed, epoch
        self.rank, self.world = rank, world
        self.batch_size, self.start_batch = batch_size, start_batch

    def _share(self) -> list[int]:
        generator = torch.Generator().manual_seed(self.seed * 100_003 + self.epoch)
        order = torch.randperm(self.size, generator=generator).tolist()
        padded = math.ceil(self.size / self.world) * self.world
        order += order[: padded - self.size]
        return order[self.rank :: self.world]

    def __iter__(self) -> Iterator[int]:
        return iter(self._share()[self.start_batch * self.batch_size :])

    def __len__(self) -> int:
        return max(0, math.ceil(self.size / self.world) - self.start_batch * self.batch_size)


def batches_per_epoch(size: int, world: int, batch_size: int) -> int:
    return math.ceil(math.ceil(size / world) / batch_size)


def _unwrap(model: nn.Module) -> nn.Module:
    # prepare_model wraps the model in DDP only when there is more than one worker.
    inner = getattr(model, "module", model)
    assert isinstance(inner, nn.Module)
    return inner


def train_loop_per_worker(config: dict[str, Any]) -> None:
    epochs = int(config.get("epochs", 3))
    lr = float(config.get("lr", 0.05))
    batch_size = int(config.get("batch_size", 32))
    hidden = int(config.get("hidden", 64))
    seed = int(config.get("seed", 0))
    every = int(config.get("checkpoint_every", 10))
    stop_at = config.get("stop_at_step")
    # get_preemption_info() is a barrier across the ranks: every rank asks after the same steps.
    check_every = int(config.get("preemption_check_every", 1))
    step_seconds = float(config.get("step_seconds", 0))
    noticed = False
    torch.manual_seed(seed)
    torch.set_num_threads(1)

    context = ray.train.get_context()
    rank, world = context.get_world_rank(), context.get_world_size()
    train_set, test_set = make_data(seed)
    per_epoch = batches_per_epoch(len(train_set), world, batch_size)
    model = prepare_model(make_model(hidden))
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    epoch, batch, step = 0, 0, 0
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as d:
            state = torch.load(os.path.join(d, "state.pt"), weights_only=True)
        _unwrap(model).load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        epoch, batch, step = int(state["epoch"]), int(state["batch"]), int(state["step"])
        if batch >= per_epoch:  # the checkpoint closed its epoch
            epoch, batch = epoch + 1, 0
    start_epoch, start_batch = epoch, batch

    for epoch in range(start_epoch, epochs):
        first = start_batch if epoch == start_epoch else 0
        sampler = EpochSampler(len(train_set), seed=seed, epoch=epoch, rank=rank, world=world,
                               batch_size=batch_size, start_batch=first)  # fmt: skip
        model.train()
        for batch, (xb, yb) in enumerate(DataLoader(train_set, batch_size, sampler=sampler), first):
            optimizer.zero_grad()
            loss = loss_fn(model(xb), yb)
            loss.backward()
            optimizer.step()
            step += 1
            done = batch + 1
            if step_seconds:
                time.sleep(step_seconds)
            preempted = False
            if check_every and not noticed and step % check_every == 0:
                preempted = noticed = ray.train.get_preemption_info() is not None
            if step % every and done < per_epoch and not preempted:
                continue
            metrics: dict[str, Any] = {
                "epoch": epoch,
                "batch": done,
                "step": step,
                "loss": float(loss.item()),
                "start_epoch": start_epoch,
                "start_batch": start_batch,
            }
            if preempted:
                metrics["preempted"] = 1
            if done == per_epoch:
                metrics["accuracy"] = _accuracy(model, test_set)
            _report(metrics, model, optimizer, rank)
            if stop_at is not None and step >= int(stop_at):
                return


def _accuracy(model: nn.Module, test_set: Any) -> float:
    model.eval()
    correct = 0
    with torch.no_grad():
        for xb, yb in DataLoader(test_set, batch_size=256):
            correct += int((model(xb).argmax(dim=1) == yb).sum())
    model.train()
    return correct / len(test_set)


def _report(
    metrics: dict[str, Any], model: nn.Module, optimizer: torch.optim.Optimizer, rank: int
) -> None:
    if rank != 0:
        ray.train.report(metrics)
        return
    with tempfile.TemporaryDirectory() as d:
        torch.save(
            {
                "model": _unwrap(model).state_dict(),
                "optimizer": optimizer.state_dict(),
                "epoch": metrics["epoch"],
                "batch": metrics["batch"],
                "step": metrics["step"],
            },
            os.path.join(d, "state.pt"),
        )
        ray.train.report(metrics, checkpoint=Checkpoint.from_directory(d))
