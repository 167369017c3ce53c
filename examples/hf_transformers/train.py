"""Hugging Face Transformers under Ray Train: ``transformers.Trainer`` with Ray's two helpers.

The loop is the one Ray Train's Transformers guide describes: build the ``Trainer`` as usual, add
``RayTrainReportCallback`` (each save of the Trainer becomes a ``ray.train.report`` carrying the
logged metrics and the checkpoint) and pass it through ``prepare_trainer``. A restarted worker
group or a new attempt resumes from ``ray.train.get_checkpoint()`` with the Trainer's own
``resume_from_checkpoint``: model, optimizer, scheduler, RNG state and step all come back.

Nothing is downloaded. The model is a small GPT-2 built from a config with random weights, and
the data are token sequences the code makes: each one counts up from a random start by a random
stride, modulo the vocabulary, so the next token is learnable from the two before it and the
loss falls well below that of a guess (``ln(vocab)``).

The Trainer logs ``epoch`` as a float, the number of epochs done; the runtime reads that as
progress (``trainer_runtime.reporter.finished_epoch``). Saving, evaluating and logging all happen
once per epoch, so every report carries that epoch's ``loss`` and ``eval_loss``.

Config keys: ``epochs``, ``lr``, ``batch_size``, ``samples`` (training sequences; a quarter as
many are held out), ``seq_len``, ``vocab``, ``n_layer``, ``n_embd``, ``n_head``, ``seed``.
Needs the packages of ``examples/requirements-frameworks.txt``.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

import ray.train
import torch
import transformers
from ray.train.huggingface.transformers import RayTrainReportCallback, prepare_trainer
from torch.utils.data import Dataset


class CountingSequences(Dataset[dict[str, torch.Tensor]]):
    """``size`` sequences of ``seq_len`` tokens: ``start, start + stride, ...`` modulo ``vocab``."""

    def __init__(self, size: int, *, seq_len: int, vocab: int, seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        starts = torch.randint(0, vocab, (size, 1), generator=generator)
        strides = torch.randint(1, 5, (size, 1), generator=generator)
        self.tokens = (starts + strides * torch.arange(seq_len)) % vocab

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        ids = self.tokens[index]
        # The model shifts the labels itself: labels are the inputs.
        return {"input_ids": ids, "labels": ids.clone()}


def make_model(config: dict[str, Any]) -> transformers.GPT2LMHeadModel:
    seq_len = int(config.get("seq_len", 16))
    gpt2 = transformers.GPT2Config(
        vocab_size=int(config.get("vocab", 32)),
        n_positions=seq_len,
        n_embd=int(config.get("n_embd", 32)),
        n_layer=int(config.get("n_layer", 2)),
        n_head=int(config.get("n_head", 2)),
        bos_token_id=0,
        eos_token_id=0,
    )
    return transformers.GPT2LMHeadModel(gpt2)


def train_loop_per_worker(config: dict[str, Any]) -> None:
    seed = int(config.get("seed", 0))
    seq_len, vocab = int(config.get("seq_len", 16)), int(config.get("vocab", 32))
    samples = int(config.get("samples", 512))
    torch.manual_seed(seed)
    torch.set_num_threads(1)

    train_set = CountingSequences(samples, seq_len=seq_len, vocab=vocab, seed=seed)
    eval_set = CountingSequences(max(1, samples // 4), seq_len=seq_len, vocab=vocab, seed=seed + 1)

    # The Trainer's own checkpoints go to a directory of this worker; RayTrainReportCallback
    # copies each one into the run's storage. The directory goes when the loop ends, whatever
    # way it ends: the run's storage holds what must be kept.
    with tempfile.TemporaryDirectory(prefix="hf-trainer-") as output_dir:
        _train(config, output_dir, train_set, eval_set, seed)


def _train(
    config: dict[str, Any],
    output_dir: str,
    train_set: CountingSequences,
    eval_set: CountingSequences,
    seed: int,
) -> None:
    args = transformers.TrainingArguments(
        output_dir=output_dir,
        num_train_epochs=int(config.get("epochs", 3)),
        learning_rate=float(config.get("lr", 3e-3)),
        per_device_train_batch_size=int(config.get("batch_size", 32)),
        per_device_eval_batch_size=int(config.get("batch_size", 32)),
        eval_strategy="epoch",
        save_strategy="epoch",
        logging_strategy="epoch",
        save_total_limit=1,
        seed=seed,
        use_cpu=True,
        report_to=[],
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    trainer = transformers.Trainer(
        model=make_model(config), args=args, train_dataset=train_set, eval_dataset=eval_set
    )
    trainer.add_callback(RayTrainReportCallback())
    trainer = prepare_trainer(trainer)

    checkpoint = ray.train.get_checkpoint()
    if checkpoint is None:
        trainer.train()
        return
    with checkpoint.as_directory() as d:
        trainer.train(
            resume_from_checkpoint=os.path.join(d, RayTrainReportCallback.CHECKPOINT_NAME)
        )
