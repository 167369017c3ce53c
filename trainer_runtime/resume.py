"""spec.resumeFrom: a new run starts from another run's checkpoint.

Ray Train V2 hands a run its own latest checkpoint through ``ray.train.get_checkpoint()``, on a
worker-group restart and on a new driver alike, but has no public way to seed a new run with
another run's checkpoint (TorchTrainer's ``resume_from_checkpoint`` is refused in V2). So the
runtime wraps the training function: on each worker, before the user's code runs and only while
the run has no checkpoint of its own, the train context's checkpoint is set to the one the
contract names. The loop reads it exactly as it reads its own after a restart; once the run has
reported a checkpoint, Ray Train hands that one out and the seed is never used again.

The driver checks first that the checkpoint is there (``check_source``), so a wrong location
fails the attempt with a message that names it instead of a run that quietly starts from
scratch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from trainer_runtime.entrypoint import wrap_loop
from trainer_runtime.storage import CHECKPOINT_PREFIX, StorageTarget, resolve_uri

log = logging.getLogger("trainer_runtime")


class ResumeSourceError(ValueError):
    """The checkpoint spec.resumeFrom names cannot be read."""


def run_has_checkpoint(target: StorageTarget, run_name: str) -> bool:
    """True when the run's directory already holds a checkpoint of its own."""
    from pyarrow import fs as pafs

    run_dir = f"{target.path.rstrip('/')}/{run_name}"
    try:
        entries = target.filesystem.get_file_info(pafs.FileSelector(run_dir, allow_not_found=True))
    except OSError:
        return False
    return any(
        e.type == pafs.FileType.Directory and e.base_name.startswith(CHECKPOINT_PREFIX)
        for e in entries
    )


def check_source(uri: str, target: StorageTarget) -> None:
    """Raise ResumeSourceError unless ``uri`` is a readable checkpoint directory."""
    from pyarrow import fs as pafs

    filesystem, path = resolve_uri(uri, target)
    try:
        info = filesystem.get_file_info(path)
    except OSError as exc:
        raise ResumeSourceError(
            f"spec.resumeFrom: cannot read the checkpoint {uri} ({type(exc).__name__}: {exc}); "
            "check that this job's storage settings and credentials reach it"
        ) from exc
    if info.type != pafs.FileType.Directory:
        what = (
            "a file, not a checkpoint directory"
            if info.type == pafs.FileType.File
            else ("not there")
        )
        raise ResumeSourceError(
            f"spec.resumeFrom: the checkpoint {uri} is {what}; name a checkpoint directory "
            "(a TrainJob's status.checkpoint.latestURI) that still exists"
        )


def seed_checkpoint(uri: str, target: StorageTarget) -> None:
    """In a training worker: hand ``uri`` to the loop unless the run has a checkpoint."""
    from ray.train import Checkpoint
    from ray.train.v2._internal.execution.context import get_train_context

    context = get_train_context()
    with context.report_order_condition:
        if context.checkpoint is not None:
            return
        filesystem, path = resolve_uri(uri, target)
        context.checkpoint = Checkpoint(path, filesystem=filesystem)
    log.info("no checkpoint of this run yet: starting from %s (spec.resumeFrom)", uri)


def with_seed(train_fn: Callable[..., Any], uri: str, target: StorageTarget) -> Callable[..., Any]:
    """``train_fn`` that first seeds the run's checkpoint with ``uri`` (same arity)."""

    def seeded(run: Callable[[], Any]) -> Any:
        seed_checkpoint(uri, target)
        return run()

    return wrap_loop(train_fn, seeded)
