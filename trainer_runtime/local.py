"""Local mode: run a contract on a Ray started on this machine, with a live console display.

``raytrain run trainjob.yaml --local`` renders a contract from the TrainJob and calls
``run_local``; ``python -m trainer_runtime --contract FILE --local`` does the same by hand.
Storage is whatever the contract says: a local directory (``pvc`` type, any absolute path) or an
S3 endpoint.
"""

from __future__ import annotations

import logging
import math
import os
import sys
from typing import Any

from raytrain_contract import Contract
from trainer_runtime import code, runlog
from trainer_runtime.console import ConsoleTransport
from trainer_runtime.reporter import Transport
from trainer_runtime.storage import storage_target
from trainer_runtime.trainer import EXIT_BAD_INPUT, reporter_for, run_training, training_cpus

log = logging.getLogger("trainer_runtime")


#: Logical CPUs the local Ray keeps for Ray Data's read tasks when the run has datasets: the
#: training workers hold theirs for the whole run, and a read task that finds no CPU free waits
#: forever (Ray counts logical CPUs; the machine's cores are shared as usual).
DATA_CPUS = 1


def cpus_needed(contract: Contract) -> int:
    """Logical CPUs for the local Ray: the workers' and Ray Data's.

    A Tune trial's driver asks for no CPU (trainer_runtime/tune.py): it takes a share of the
    head's own resource, which the one local node has.
    """
    data = DATA_CPUS if contract.datasets else 0
    return max(1, math.ceil(training_cpus(contract)) + data)


def run_local(
    contract: Contract,
    *,
    display: bool = True,
    transport: Transport | None = None,
    min_interval: float | None = None,
    ray_logs: bool = False,
    continue_run: bool = False,
) -> int:
    """Run ``contract`` on a local Ray; return the exit code (0 on success).

    Reports go to ``transport`` when given, else to a console display. Ray is started here (and
    stopped again) unless the caller already started it; ``ray_logs`` forwards the workers' own
    output (the training loop's prints, Ray Train's messages) to this terminal.

    ``continue_run`` (``raytrain run --local``, where no TrainJob keeps the count): the run is
    the next attempt after the last one stored under the run's directory, and its step and
    checkpoint counts go on from that attempt's metrics.
    """
    previous = None
    if continue_run:
        contract, previous = _continued(contract)
    import ray

    started = False
    cwd_before = os.getcwd()
    try:
        runtime_env = code.prepare(contract)
    except (code.CodeError, OSError) as exc:
        log.error("%s", exc)
        return EXIT_BAD_INPUT
    if not ray.is_initialized():
        # Workers import the entrypoint the way the driver does: from the working directory,
        # or from the code snapshot (spec.code), which becomes Ray's working_dir.
        cwd = os.getcwd()
        if cwd not in sys.path:
            sys.path.insert(0, cwd)
        ray.init(
            num_cpus=cpus_needed(contract),
            include_dashboard=False,
            logging_level=logging.WARNING,
            log_to_driver=ray_logs,
            runtime_env=runtime_env,
        )
        started = True
    sink = transport or ConsoleTransport(contract.run_name, live=display)
    interval = 0.0 if min_interval is None and transport is None else min_interval
    reporter = reporter_for(contract, sink, min_interval=interval)
    reporter.previous = previous
    try:
        return run_training(contract, reporter)
    finally:
        if started:
            ray.shutdown()
        os.chdir(cwd_before)


def _continued(contract: Contract) -> tuple[Contract, dict[str, Any] | None]:
    """The contract as the attempt after the run's last stored one, and that attempt's status."""
    try:
        found = runlog.last_attempt(storage_target(contract.storage), contract.run_name)
    except (OSError, ValueError) as exc:
        # run_training reports storage it cannot reach, with the fix; nothing to continue here.
        log.debug("no stored attempt read: %s: %s", type(exc).__name__, exc)
        return contract, None
    if found is None:
        return contract, None
    attempt, status = found
    checkpoint = status.get("checkpoint") or {}
    log.info(
        "run %s: attempt %d goes on from attempt %d (%s checkpoints, latest %s)",
        contract.run_name,
        attempt + 1,
        attempt,
        checkpoint.get("count", 0),
        checkpoint.get("latestURI", "none"),
    )
    return contract.model_copy(update={"attempt": attempt + 1}), status
