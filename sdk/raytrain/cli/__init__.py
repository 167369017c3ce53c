"""`raytrain`: submit, inspect, control and wait for TrainJobs, or run one locally.

    raytrain run examples/digits.yaml --local      # train on this machine with a local Ray
    raytrain submit examples/digits.yaml           # create it in the cluster
    raytrain submit job.yaml --code ./src          # ... with your code, no image build
    raytrain list -A                               # every TrainJob, with progress
    raytrain get digits                            # one job in detail
    raytrain wait digits --for Succeeded           # block until done; exit 1 if it failed
    raytrain logs digits -f                        # the training driver's output
    raytrain logs digits --attempt 0 --worker 1    # a failed worker's error, stored
    raytrain logs digits --attempt 0 --stacks      # every rank's stacks when it hung
    raytrain events digits                         # what happened to it and its pods
    raytrain suspend digits / resume digits        # checkpoint and free the cluster, and back
    raytrain checkpoints digits --verify           # every checkpoint in storage, checksums read
    raytrain checkpoints digits -o uri             # the latest and best checkpoint URIs
    raytrain session digits                        # the Ray dashboard on localhost:8265
    raytrain delete digits

The same commands run as `kubectl raytrain ...`; Python scripts use `raytrain.TrainJobClient`.

Every command that prints takes `-o json` for scripts.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from raytrain import __version__


def _add_namespace(parser: argparse.ArgumentParser, all_namespaces: bool = False) -> None:
    parser.add_argument("-n", "--namespace", help="namespace (default: the kubeconfig's)")
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG)")
    parser.add_argument("--context", help="kubeconfig context")
    if all_namespaces:
        parser.add_argument("-A", "--all-namespaces", action="store_true", help="every namespace")


def _add_output(parser: argparse.ArgumentParser, choices: Sequence[str]) -> None:
    parser.add_argument("-o", "--output", choices=list(choices), default=choices[0])


def _add_code(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--code",
        metavar="DIR",
        help="your training code: DIR is stored as a snapshot beside the job's checkpoints and "
        "put on the import path of the driver and every worker (no image build); "
        "spec.entrypoint names a module or script in it",
    )


def _attempt(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of 0 or more")
    return int(text)


def build_parser(prog: str = "raytrain") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
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
    run.add_argument(
        "--torchrun",
        action="store_true",
        help="run the loop in one process per worker under torchrun, no Ray actors "
        "(Ray Train's local mode, for debugging; no checkpoints are kept)",
    )
    run.add_argument("--quiet", action="store_true", help="no live progress bar")
    _add_code(run)
    run.add_argument(
        "--ray-logs",
        action="store_true",
        help="also show the workers' output (the training loop's prints, Ray Train's messages)",
    )

    submit = sub.add_parser(
        "submit",
        help="create the objects in FILE in the cluster (with --code DIR: your code, no image)",
        description="Create every object of FILE. With --code DIR, DIR is packed (what its "
        ".gitignore files leave out stays out), stored in the TrainJob's own S3 storage as "
        "<storage>/code/<sha256>.zip and recorded in spec.code: the driver and every worker "
        "import from it, and every retry and resume runs that same snapshot.",
    )
    submit.add_argument("file", help="manifest: a TrainJob, plus Secrets/PVCs it needs")
    _add_code(submit)
    submit.add_argument(
        "--s3-endpoint",
        help="S3 endpoint this machine stores the code snapshot through (default: "
        "$AWS_ENDPOINT_URL, else the TrainJob's spec.storage.s3.endpoint); for an endpoint "
        "that only pods can reach",
    )
    submit.add_argument(
        "--replace",
        action="store_true",
        help="delete a TrainJob of the same name first (its checkpoints stay in storage; the "
        "new job starts a run of its own)",
    )
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
        choices=["Succeeded", "Complete", "Failed", "Running", "Created", "Suspended"],
        help="condition to wait for (Complete is Succeeded; default Succeeded)",
    )
    wait.add_argument("--timeout", type=float, default=3600.0, help="seconds (default 3600)")
    _add_namespace(wait)
    _add_output(wait, ("text", "json"))

    logs = sub.add_parser(
        "logs",
        help="print the training driver's output, an attempt's stored logs, a worker's error",
        description="Print what the training prints. The current attempt is read live from the "
        "pod that KubeRay's submitter Job runs (it follows the Ray job's driver). An earlier "
        "attempt (--attempt), a worker's error (--worker), the metrics history (--metrics), "
        "every rank's stacks from when the attempt hung (--stacks), and "
        "the driver of an attempt whose Ray cluster is gone are read from what the runtime "
        "stored beside the checkpoints (<storage>/<run>/attempt-N/), through a short-lived pod "
        "in the job's namespace: that needs RBAC there on pods (create, get, watch, delete) and "
        "pods/log (get).",
    )
    logs.add_argument("name")
    logs.add_argument(
        "-f", "--follow", action="store_true", help="wait for the pod if needed, then stream"
    )
    logs.add_argument("--tail", type=int, default=-1, help="lines from the end (default all)")
    logs.add_argument(
        "--attempt",
        type=_attempt,
        metavar="N",
        help="an attempt's stored logs (0 is the first; default: the current attempt)",
    )
    which = logs.add_mutually_exclusive_group()
    which.add_argument(
        "--worker",
        type=_attempt,
        metavar="I",
        help="the error of training worker of rank I (stored when that worker failed)",
    )
    which.add_argument(
        "--metrics",
        action="store_true",
        help="the metrics history: one JSON line per report (time, epoch, step, metrics, "
        "checkpoint)",
    )
    which.add_argument(
        "--stacks",
        action="store_true",
        help="every training process's stacks, taken when the attempt's reports stopped for "
        "the hang timeout (spec.failure.hangTimeoutSeconds), with where each rank was, grouped",
    )
    _add_namespace(logs)

    delete = sub.add_parser(
        "delete", help="delete TrainJobs (their RayJobs, Ray clusters and pods go with them)"
    )
    delete.add_argument("names", nargs="+", metavar="NAME")
    _add_namespace(delete)

    for verb, text in (
        ("suspend", "checkpoint, then remove the Ray cluster (spec.suspend: true)"),
        ("resume", "start a new Ray cluster from the latest checkpoint (spec.suspend: false)"),
    ):
        cmd = sub.add_parser(verb, help=text)
        cmd.add_argument("name")
        _add_namespace(cmd)
        _add_output(cmd, ("text", "json"))

    events = sub.add_parser(
        "events", help="Events of a TrainJob and of its RayJobs, Ray clusters and pods"
    )
    events.add_argument("name")
    _add_namespace(events)
    _add_output(events, ("text", "json"))

    ckpt = sub.add_parser(
        "checkpoints",
        help="the run's checkpoints in storage, each checked against its manifest",
        description="List the checkpoints of the TrainJob's run in its S3 storage, newest "
        "first: time, epoch, metrics, files, size, and whether each can be resumed from. "
        "Without --verify each is checked by a listing: every file of its manifest there with "
        "its size (nothing is read). The status's latest, best and resumed-from are marked. "
        "The bucket is read from this machine: its AWS credentials (AWS_ACCESS_KEY_ID/"
        "AWS_SECRET_ACCESS_KEY, AWS_PROFILE, ~/.aws), else the job's credentials Secret. "
        "Exit 0: the newest usable checkpoint passed and none failed; 1: an error (the job, "
        "the bucket, credentials); 2: the storage is a PVC, which this machine cannot read; "
        "3: a checkpoint failed its check (a missing file, a size, a checksum); 4: no "
        "checkpoint is usable. -o uri prints the status's latest and best URIs only, without "
        "reading storage.",
    )
    ckpt.add_argument("name")
    ckpt.add_argument(
        "--verify",
        action="store_true",
        help="also read every byte of every checkpoint and compare each file's CRC32C with the "
        "manifest: the run's checkpoints are all downloaded once, which takes as long as that",
    )
    ckpt.add_argument(
        "--s3-endpoint",
        help="S3 endpoint this machine reads the bucket through (default: $AWS_ENDPOINT_URL, "
        "else the TrainJob's spec.storage.s3.endpoint); for an endpoint only pods can reach",
    )
    _add_namespace(ckpt)
    _add_output(ckpt, ("text", "json", "uri"))

    session = sub.add_parser(
        "session",
        help="forward the Ray dashboard of a TrainJob's current cluster to localhost",
        description="Run `kubectl port-forward` to the head Service of the TrainJob's current "
        "Ray cluster (dashboard port 8265) and print the local URL; Ctrl-C stops it.",
    )
    session.add_argument("name")
    session.add_argument(
        "--port", type=int, default=8265, help="local port (default 8265; 0 picks a free one)"
    )
    session.add_argument("--address", default="127.0.0.1", help="local address (default 127.0.0.1)")
    session.add_argument("--kubectl", default="kubectl", help="kubectl binary (default: on PATH)")
    _add_namespace(session)
    return parser


def main(argv: Sequence[str] | None = None, prog: str = "raytrain") -> int:
    args = build_parser(prog).parse_args(argv)
    if args.command == "run":
        from raytrain.cli.local import run_local_command

        return run_local_command(args)
    from raytrain.cli import cluster

    commands = {
        "submit": cluster.submit,
        "get": cluster.get,
        "list": cluster.list_jobs,
        "wait": cluster.wait,
        "logs": cluster.logs,
        "delete": cluster.delete,
        "suspend": cluster.suspend,
        "resume": cluster.resume,
        "events": cluster.events,
        "checkpoints": cluster.checkpoints,
        "session": cluster.session,
    }
    return commands[args.command](args)


def kubectl_main() -> int:
    """`kubectl raytrain ...`: kubectl runs `kubectl-raytrain` from PATH with the rest of argv."""
    return main(prog="kubectl raytrain")


if __name__ == "__main__":
    sys.exit(main())
