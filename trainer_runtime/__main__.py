"""``python -m trainer_runtime``: the RayJob entrypoint (or ``--local`` to run by hand)."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from raytrain_contract import ContractError, read_contract

DEFAULT_CONTRACT = "/etc/raytrain/contract.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainer_runtime", description=__doc__)
    parser.add_argument(
        "--contract",
        default=os.environ.get("RAYTRAIN_CONTRACT", DEFAULT_CONTRACT),
        help="runtime contract JSON (default: $RAYTRAIN_CONTRACT or %(default)s)",
    )
    parser.add_argument(
        "--local", action="store_true", help="start a local Ray and show progress in the terminal"
    )
    parser.add_argument(
        "--torchrun",
        action="store_true",
        help="run the loop in this process, one of those torchrun started (no Ray actors)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        contract = read_contract(args.contract)
    except ContractError as exc:
        print(f"trainer_runtime: {exc}", file=sys.stderr)
        return 2

    if args.torchrun:
        from trainer_runtime.torchrun import run_process

        return run_process(contract)

    if args.local:
        from trainer_runtime.local import run_local

        return run_local(contract, ray_logs=True, continue_run=True)

    import ray

    from trainer_runtime import code, oomwatch
    from trainer_runtime.console import ConsoleTransport
    from trainer_runtime.kube import KubernetesTransport
    from trainer_runtime.reporter import FAILED, Transport
    from trainer_runtime.trainer import EXIT_BAD_INPUT, reporter_for, run_training

    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    transport: Transport
    if contract.report.enabled:
        transport = KubernetesTransport(contract.train_job.namespace, contract.train_job.name)
        # On the head: the kernel's out-of-memory kills there are recorded in the status.
        logging.getLogger("trainer_runtime").info("%s", oomwatch.start_beside(os.environ))
    else:
        transport = ConsoleTransport(contract.run_name, live=False)
    reporter = reporter_for(contract, transport)
    # The code snapshot is fetched before Ray starts: it is the job's working_dir.
    try:
        runtime_env = code.prepare(contract)
    except (code.CodeError, OSError) as exc:
        logging.getLogger("trainer_runtime").error("%s", exc)
        reporter.start()
        reporter.finish(FAILED, str(exc))
        return EXIT_BAD_INPUT
    ray.init(runtime_env=runtime_env)  # the RayJob's cluster (RAY_ADDRESS), started by KubeRay
    return run_training(contract, reporter)


if __name__ == "__main__":
    sys.exit(main())
