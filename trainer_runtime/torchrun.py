"""``--torchrun``: the TrainJob's loop in processes that torchrun starts, with no Ray actors.

This is Ray Train's local mode (``ScalingConfig(num_workers=0)``) under ``torch.distributed.run``,
the way Ray Train's docs debug a loop with ``RAY_TRAIN_V2_ENABLED=1 torchrun ...``: torchrun
starts one process per worker and sets ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``...; in each
process Ray Train sets up torch.distributed (gloo on the CPU, nccl with CUDA) and calls the loop,
where ``ray.train.get_context()``, ``prepare_model``, ``prepare_data_loader`` and
``ray.train.report`` work as in a Ray run. Each process is a plain Python process a debugger can
attach to. What local mode leaves out: checkpoints stay in the process (nothing is written to
storage, nothing resumes), and Ray Data inputs work with one process only.
"""

from __future__ import annotations

import logging
import os
import sys
import traceback
from typing import Any

from raytrain_contract import Contract

log = logging.getLogger("trainer_runtime")

#: torchrun's variables; Ray Train's local mode sets up torch.distributed when all are present.
TORCHRUN_ENV = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
)


class TorchrunError(ValueError):
    """The contract cannot run under torchrun; the message names the field and the fix."""


def processes(contract: Contract) -> int:
    s = contract.scaling
    if s.num_workers is not None:
        return s.num_workers
    return s.min_workers or 1


def check(contract: Contract, nproc: int) -> None:
    """Refuse what Ray Train's local mode cannot run, before any process starts."""
    if contract.tune is not None:
        raise TorchrunError(
            "spec.tune: --torchrun runs one training, not a search; drop --torchrun to run the "
            "search on a local Ray, or remove spec.tune"
        )
    if contract.datasets and nproc > 1:
        names = ", ".join(repr(n) for n in contract.datasets)
        raise TorchrunError(
            f"spec.datasets ({names}): Ray Train's local mode reads Ray Data inputs in one "
            f"process only, and this run has {nproc}; pass --workers 1, or drop --torchrun"
        )


def torchrun_argv(contract_path: str, nproc: int) -> list[str]:
    """The command that starts ``nproc`` processes on this machine, each running the contract."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",  # a rendezvous of its own on a free local port
        f"--nproc-per-node={nproc}",
        "-m",
        "trainer_runtime",
        "--contract",
        contract_path,
        "--torchrun",
    ]


def _read(contract: Contract) -> dict[str, Any]:
    if not contract.datasets:
        return {}
    from trainer_runtime.storage import storage_target
    from trainer_runtime.trainer import DataPlan, build_datasets

    # No Ray workers hold CPUs here: Ray Data has the Ray it starts in this process to itself.
    plan = DataPlan(cluster_cpus=float(os.cpu_count() or 1), training_cpus=0.0)
    datasets, _ = build_datasets(contract, storage_target(contract.storage), plan)
    return datasets


def run_process(contract: Contract) -> int:
    """Run the loop in this process, one of torchrun's; return the exit code."""
    missing = [v for v in TORCHRUN_ENV if v not in os.environ]
    if missing:
        log.error(
            "--torchrun: %s not set; start this under torchrun (raytrain run FILE --local "
            "--torchrun does)",
            ", ".join(missing),
        )
        return 2
    rank = int(os.environ["RANK"])
    try:
        check(contract, int(os.environ["WORLD_SIZE"]))
        from trainer_runtime.entrypoint import load_entrypoint

        train_fn = load_entrypoint(contract.entrypoint)
    except (TorchrunError, ImportError) as exc:
        log.error("%s", exc)
        return 2

    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    if rank == 0:
        log.info(
            "run %s under torchrun: %s processes, Ray Train local mode (no checkpoints kept)",
            contract.run_name,
            os.environ["WORLD_SIZE"],
        )
    try:
        trainer = TorchTrainer(
            train_fn,
            train_loop_config=dict(contract.config),
            scaling_config=ScalingConfig(num_workers=0),
            run_config=RunConfig(name=contract.run_name),
            datasets=_read(contract) or None,
        )
        result = trainer.fit()
    except Exception as exc:
        from trainer_runtime.trainer import describe_error

        log.error(
            "rank %d: training failed: %s\n%s", rank, describe_error(exc), traceback.format_exc()
        )
        return 1
    log.info("rank %d of %s done", rank, os.environ["WORLD_SIZE"])
    if rank == 0:
        metrics = result.metrics or {}
        shown = ", ".join(
            f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
            for k, v in sorted(metrics.items())
            if isinstance(v, int | float) and not k.startswith("_")
        )
        log.info("run %s finished: %s", contract.run_name, shown or "no metrics reported")
    return 0
