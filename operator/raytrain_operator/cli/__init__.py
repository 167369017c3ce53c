"""`raytrain`: submit, inspect and wait for TrainJobs, or run one locally without Kubernetes.

    raytrain run examples/digits.yaml --local      # train on this machine with a local Ray
    raytrain submit examples/digits.yaml           # create it in the cluster
    raytrain list -A                               # every TrainJob, with progress
    raytrain get digits                            # one job in detail
    raytrain wait digits --for Succeeded           # block until done; exit 1 if it failed
    raytrain logs digits -f                        # the training driver's output

Every command that prints takes `-o json` for scripts.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from raytrain_operator import __version__


def _add_namespace(parser: argparse.ArgumentParser, all_namespaces: bool = False) -> None:
    parser.add_argument("-n", "--namespace", help="namespace (default: the kubeconfig's)")
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG)")
    parser.add_argument("--context", help="kubeconfig context")
    if all_namespaces:
        parser.add_argument("-A", "--all-namespaces", action="store_true", help="every namespace")


def _add_output(parser: argparse.ArgumentParser, choices: Sequence[str]) -> None:
    parser.add_argument("-o", "--output", choices=list(choices), default=choices[0])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="raytrain",
        description="Run and watch Ray Train TrainJobs (trainjobs.raytrain.dev).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1] if __doc__ else None,
    )
    parser.add_argument("--version", action="version", version=f"raytrain {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    run = sub.add_parser(
        "run",
        help="run a TrainJob manifest locally (--local) on this machine's Ray",
        description="Run the TrainJob in FILE with a local Ray instead of a cluster: same "
        "runtime, same contract, checkpoints on a local directory or an S3 endpoint.",
    )
    run.add_argument("file", help="manifest holding one TrainJob (other objects are ignored)")
    run.add_argument(
        "--local", action="store_true", required=True, help="run here, not in a cluster"
    )
    run.add_argument(
        "--storage-path",
        help="where checkpoints go: a directory, or s3://bucket/prefix "
        "(default: the manifest's S3 URI when --s3-endpoint is given, else ./.raytrain/storage)",
    )
    run.add_argument("--s3-endpoint", help="S3-compatible endpoint for s3:// storage paths")
    run.add_argument("--workers", type=int, help="override scaling.numWorkers")
    run.add_argument("--epochs", type=int, help="override config.epochs")
    run.add_argument(
        "--new-run",
        action="store_true",
        help="start a new run instead of resuming this job's latest local checkpoint",
    )
    run.add_argument("--quiet", action="store_true", help="no live progress bar")
    run.add_argument(
        "--ray-logs",
        action="store_true",
        help="also show the workers' output (the training loop's prints, Ray Train's messages)",
    )

    submit = sub.add_parser("submit", help="create the objects in FILE in the cluster")
    submit.add_argument("file", help="manifest: a TrainJob, plus Secrets/PVCs it needs")
    _add_namespace(submit)
    _add_output(submit, ("text", "json"))

    get = sub.add_parser("get", help="show one TrainJob in detail")
    get.add_argument("name")
    _add_namespace(get)
    _add_output(get, ("text", "json", "yaml"))

    lst = sub.add_parser("list", help="list TrainJobs with status and progress")
    _add_namespace(lst, all_namespaces=True)
    _add_output(lst, ("text", "json"))

    wait = sub.add_parser(
        "wait", help="wait until a TrainJob reaches a condition (exit 1 if it failed)"
    )
    wait.add_argument("name")
    wait.add_argument(
        "--for",
        dest="condition",
        default="Succeeded",
        choices=["Succeeded", "Failed", "Running", "Created", "Suspended"],
    )
    wait.add_argument("--timeout", type=float, default=3600.0, help="seconds (default 3600)")
    _add_namespace(wait)
    _add_output(wait, ("text", "json"))

    logs = sub.add_parser(
        "logs",
        help="print the training driver's output (KubeRay's submitter pod)",
        description="Print what the training prints: the log of the pod that KubeRay's "
        "submitter Job runs for the current attempt (it follows the Ray job's driver).",
    )
    logs.add_argument("name")
    logs.add_argument(
        "-f", "--follow", action="store_true", help="wait for the pod if needed, then stream"
    )
    logs.add_argument("--tail", type=int, default=-1, help="lines from the end (default all)")
    _add_namespace(logs)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "run":
        from raytrain_operator.cli.local import run_local_command

        return run_local_command(args)
    from raytrain_operator.cli import cluster

    commands = {
        "submit": cluster.submit,
        "get": cluster.get,
        "list": cluster.list_jobs,
        "wait": cluster.wait,
        "logs": cluster.logs,
    }
    return commands[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
