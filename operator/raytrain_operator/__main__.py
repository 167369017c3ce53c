"""`python -m raytrain_operator`: run the operator in-process with our settings.

Cluster-wide unless --namespace is given (repeatable). kopf peering through the
ClusterKopfPeering (or, per namespace, KopfPeering) `raytrain-operator`: of several running
instances only the one with the highest --peering-priority (default: the start time, so the
newest) handles TrainJobs, the others wait. Prometheus metrics on --metrics-port at /metrics, kopf's
liveness probe on --health-port at /healthz.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import os
import secrets
import socket
import sys
import time
from typing import Any, cast

# The operator reaches the API server through raytrain_operator.k8s (the standard library's
# HTTP client) and kopf's own client. kopf imports the `kubernetes` package only to recognise
# its model objects, which this operator never hands it, and that import alone loads ~800
# generated classes (~50 MiB). Marked missing before kopf is imported, `import kubernetes`
# fails in this process and kopf does without it (its own kubeconfig and service-account
# logins serve it). The CLI, the SDK and the uninstall hook run in other processes and keep
# the client.
sys.modules.setdefault("kubernetes", None)  # type: ignore[arg-type]

import kopf  # noqa: E402

from raytrain_operator import handlers, metrics  # noqa: E402
from raytrain_operator.handlers.engine import Engine  # noqa: E402
from raytrain_operator.settings import PEERING_MODES, OperatorConfig  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    defaults = OperatorConfig()
    parser = argparse.ArgumentParser(prog="python -m raytrain_operator", description=__doc__)
    parser.add_argument(
        "--namespace",
        action="append",
        default=[],
        help="watch only this namespace (repeatable); default: the whole cluster",
    )
    parser.add_argument("--metrics-port", type=int, default=defaults.metrics_port)
    parser.add_argument("--health-port", type=int, default=defaults.health_port)
    parser.add_argument(
        "--bind-address",
        default="0.0.0.0",
        help="address the metrics and health endpoints listen on (default %(default)s, what a "
        "pod's probes and Prometheus reach; 127.0.0.1 for an operator run outside the cluster)",
    )
    parser.add_argument("--verbose", action="store_true", help="debug logging")
    parser.add_argument(
        "--log-format", choices=["plain", "full", "json"], default="full", help="log line format"
    )
    parser.add_argument(
        "--resync-seconds",
        type=float,
        default=defaults.resync_seconds,
        help="list every TrainJob, RayJob and RayCluster this often and reconcile those that "
        "changed without an event reaching the operator (default %(default)s)",
    )
    parser.add_argument(
        "--checkpoint-grace-seconds",
        type=float,
        default=defaults.checkpoint_grace_seconds,
        help="longest wait for a checkpoint before a suspend goes ahead (default %(default)s)",
    )
    parser.add_argument(
        "--peering-mode",
        choices=PEERING_MODES,
        default=defaults.peering_mode,
        help="auto: peer when the peering object exists, else run alone; required: refuse to "
        "run without it (the chart installs it); off: never peer (default %(default)s)",
    )
    parser.add_argument("--peering-name", default=defaults.peering_name)
    parser.add_argument(
        "--peering-priority",
        type=int,
        default=None,
        help="the highest priority among live instances works (default: the start time in ms)",
    )
    parser.add_argument(
        "--identity",
        default=None,
        help="this instance's name among peers and in the API server's audit log (user agent); "
        "default: $POD_ID, else host, process id and a random suffix",
    )
    return parser.parse_args(argv)


#: glibc's mallopt parameter for the number of malloc arenas.
M_ARENA_MAX = -8


def limit_malloc_arenas(arenas: int = 2) -> bool:
    """Fewer glibc malloc arenas: by default each thread that allocates may get one (up to
    8 per core), and a threaded Python process' RSS grows with them. Must run before the
    operator's threads start; a no-op (False) off glibc."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return bool(libc.mallopt(M_ARENA_MAX, arenas))
    except (OSError, AttributeError):
        return False


def config_from(args: argparse.Namespace) -> OperatorConfig:
    config = OperatorConfig()
    config.namespaces = list(args.namespace)
    config.metrics_port = args.metrics_port
    config.health_port = args.health_port
    config.verbose = args.verbose
    config.resync_seconds = args.resync_seconds
    config.checkpoint_grace_seconds = args.checkpoint_grace_seconds
    config.peering_mode = args.peering_mode
    config.peering_name = args.peering_name
    config.peering_priority = (
        args.peering_priority if args.peering_priority is not None else int(time.time() * 1000)
    )
    return config


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    limit_malloc_arenas()
    config = config_from(args)
    # kopf's own default: POD_ID (the chart sets it to the pod's name).
    identity = (
        args.identity
        or os.environ.get("POD_ID")
        or f"{socket.gethostname()}/{os.getpid()}/{secrets.token_hex(2)}"
    )
    engine = Engine(config, identity)
    registry = kopf.OperatorRegistry()
    handlers.register(registry, select_namespaces=config.namespace_selector is not None)

    kopf.configure(verbose=args.verbose, log_format=kopf.LogFormat[args.log_format.upper()])
    metrics.serve(args.metrics_port, args.bind_address)
    kopf.run(
        registry=registry,
        memo=kopf.Memo(engine=engine),
        identity=cast(Any, identity),  # kopf's Identity is a NewType of str
        standalone=config.peering_mode == "off",
        clusterwide=not config.namespaces,
        namespaces=config.namespaces,
        liveness_endpoint=f"http://{args.bind_address}:{args.health_port}/healthz",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
