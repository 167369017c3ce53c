"""``python -m trainer_runtime.drain``: a worker pod's preStop hook.

Kubernetes runs it when the pod's deletion starts (an eviction by a node drain, a preemption, a
delete), before the container gets SIGTERM, and gives it at most the pod's grace period. It asks
Ray's GCS to drain this pod's Ray node with the reason PREEMPTION and a deadline
(``$RAYTRAIN_DRAIN_SECONDS`` from now, the grace period less a margin), the call the autoscaler
makes before it removes a node. Ray Train 2.60 polls the draining nodes every 5 s: the training
loop then gets a value from ``ray.train.get_preemption_info()`` and can report a just-in-time
checkpoint, and once the deadline passes the controller restarts the worker group from the
latest checkpoint, charged to FailureConfig.max_preemption_failures, not max_failures.

The hook then waits while a Ray Train worker process still runs in this pod (the pod shares one
process namespace), up to the deadline, so the SIGTERM does not cut a checkpoint upload short.
A pod with no Ray Train worker (the run has finished, the cluster is being removed) returns at
once. Every failure is logged and ends the hook with 0: a hook that fails only delays the
delete, it never stops it.

The GCS address and this pod's IP come from the environment KubeRay gives every worker
container (``RAY_ADDRESS`` or ``FQ_RAY_IP``/``RAY_PORT``, ``MY_POD_IP``); with token
authentication KubeRay gives it the cluster's token (``RAY_AUTH_TOKEN``) too, which Ray's
client reads itself. First the hook reads its own pod: without a True DisruptionTarget condition
the delete is a plain one (a suspend, a retry, the cluster's removal after the run) and it
returns at once rather than hold the pod for the whole deadline; when it cannot read the pod it
drains.

``--head`` is the head's hook. Draining the head saves nothing (the GCS and the driver live
there) and the attempt ends with it; the hook reads its own pod with the pod's service account
(the per-job Role grants ``get`` on pods) and, when the pod's DisruptionTarget condition says
Kubernetes is taking it away, writes ``status.disrupted`` (attempt, pod, reason, message) to the
TrainJob: the pod may be gone by the time the operator sees the attempt fail, and the record
lets it count the failure as a preemption.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

log = logging.getLogger("trainer_runtime.drain")

ENV_DRAIN_SECONDS = "RAYTRAIN_DRAIN_SECONDS"
DEFAULT_DRAIN_SECONDS = 110
#: The process title Ray gives a Ray Train worker actor (`ray::RayTrainWorker...`).
TRAIN_WORKER_TITLE = b"RayTrainWorker"
POLL_SECONDS = 1.0
REASON_MESSAGE = "the Kubernetes pod {pod} is being deleted (preStop hook)"


class Gcs(Protocol):
    def node_id_for_ip(self, ip: str) -> str | None: ...

    def drain(self, node_id: str, message: str, deadline_ms: int) -> tuple[bool, str]: ...


class RayGcs:
    """Ray's GCS client (ray._raylet.GcsClient), imported only when the hook runs."""

    def __init__(self, address: str) -> None:
        raylet: Any = importlib.import_module("ray._raylet")
        self._client: Any = raylet.GcsClient(address=address)

    def node_id_for_ip(self, ip: str) -> str | None:
        gcs_pb2: Any = importlib.import_module("ray.core.generated.gcs_pb2")
        alive = gcs_pb2.GcsNodeInfo.GcsNodeState.ALIVE
        for node_id, info in self._client.get_all_node_info(timeout=10).items():
            if info.node_manager_address == ip and info.state == alive:
                return str(node_id.hex())
        return None

    def drain(self, node_id: str, message: str, deadline_ms: int) -> tuple[bool, str]:
        autoscaler_pb2: Any = importlib.import_module("ray.core.generated.autoscaler_pb2")
        reason = autoscaler_pb2.DrainNodeReason.Value("DRAIN_NODE_REASON_PREEMPTION")
        accepted, why = self._client.drain_node(node_id, reason, message, deadline_ms)
        return bool(accepted), str(why or "")


def gcs_address(environ: Mapping[str, str]) -> str | None:
    """The head's GCS as KubeRay names it in a worker container."""
    address = environ.get("RAY_ADDRESS")
    if address and not address.startswith(("ray://", "http://", "https://", "auto")):
        return address
    host = environ.get("FQ_RAY_IP") or environ.get("RAY_IP")
    if not host:
        return None
    return f"{host}:{environ.get('RAY_PORT') or '6379'}"


def drain_seconds(environ: Mapping[str, str]) -> int:
    raw = environ.get(ENV_DRAIN_SECONDS, "")
    try:
        value = int(raw)
    except ValueError:
        return DEFAULT_DRAIN_SECONDS
    return max(1, value)


def train_worker_running(proc: Path = Path("/proc")) -> bool:
    """Whether a Ray Train worker process runs in this pod's process namespace."""
    for entry in proc.iterdir() if proc.is_dir() else ():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if TRAIN_WORKER_TITLE in cmdline:
            return True
    return False


def run(
    environ: Mapping[str, str],
    gcs_factory: Callable[[str], Gcs] = RayGcs,
    busy: Callable[[], bool] = train_worker_running,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
    disrupted: Callable[[], bool | None] | None = None,
) -> str:
    """Drain this pod's Ray node and wait; returns what happened, in words (for the log)."""
    start = clock()
    deadline = start + drain_seconds(environ)
    if not busy():
        return "no Ray Train worker in this pod: nothing to drain"
    if (disrupted or (lambda: pod_disrupted(environ)))() is False:
        # Our own delete (a suspend, a retry, the cluster's removal) or a user's: the run ends
        # with the cluster anyway, and waiting would only hold the next attempt back.
        return "the pod is deleted, not disrupted (no DisruptionTarget condition): not drained"
    address, ip = gcs_address(environ), environ.get("MY_POD_IP")
    if not address or not ip:
        return "RAY_ADDRESS/FQ_RAY_IP or MY_POD_IP is not set: not a KubeRay worker, not drained"
    try:
        gcs = gcs_factory(address)
        node_id = gcs.node_id_for_ip(ip)
        if node_id is None:
            return f"no live Ray node with IP {ip} at {address}: not drained"
        message = REASON_MESSAGE.format(pod=environ.get("MY_POD_NAME") or ip)
        accepted, why = gcs.drain(node_id, message, int(deadline * 1000))
    except Exception as exc:  # the hook must never block the delete
        return f"draining the Ray node failed ({type(exc).__name__}: {exc})"
    if not accepted:
        return f"Ray refused to drain node {node_id}: {why}"
    while clock() < deadline and busy():
        sleep(min(POLL_SECONDS, max(0.0, deadline - clock())))
    left = "gone" if not busy() else "still running at the deadline"
    return (
        f"drained Ray node {node_id}; its Ray Train worker is {left} after {clock() - start:.0f} s"
    )


def disruption_of(pod: Mapping[str, Any]) -> dict[str, str] | None:
    """The pod's DisruptionTarget condition when it is True: Kubernetes is taking it away (an
    eviction, a preemption, a node going); None for a plain delete."""
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "DisruptionTarget" and cond.get("status") == "True":
            return {
                "reason": str(cond.get("reason") or ""),
                "message": str(cond.get("message") or ""),
            }
    return None


class Kube(Protocol):
    def read_pod(self, namespace: str, name: str) -> Mapping[str, Any]: ...

    def patch_status(self, body: dict[str, Any]) -> None: ...


class KubernetesApi:
    """The pod's service account: read its own pod, patch its TrainJob's status."""

    def __init__(self, namespace: str, name: str) -> None:
        from trainer_runtime.kube import KubernetesTransport

        self._transport = KubernetesTransport(namespace, name)

    def read_pod(self, namespace: str, name: str) -> Mapping[str, Any]:
        from kubernetes import client, config

        config.load_incluster_config()
        api_client = client.ApiClient()
        pod = client.CoreV1Api(api_client).read_namespaced_pod(name, namespace, _request_timeout=10)
        result: Mapping[str, Any] = api_client.sanitize_for_serialization(pod)
        return result

    def patch_status(self, body: dict[str, Any]) -> None:
        self._transport.patch_status(body)


def pod_disrupted(
    environ: Mapping[str, str], kube_factory: Callable[[str, str], Kube] = KubernetesApi
) -> bool | None:
    """Whether this pod carries a True DisruptionTarget condition; None when it cannot tell
    (the hook then drains: a drain it did not need costs time, a missed one costs work)."""
    namespace = environ.get("RAYTRAIN_TRAINJOB_NAMESPACE")
    trainjob = environ.get("RAYTRAIN_TRAINJOB_NAME")
    pod_name = environ.get("RAYTRAIN_POD_NAME")
    if not (namespace and trainjob and pod_name):
        return None
    try:
        pod = kube_factory(namespace, trainjob).read_pod(namespace, pod_name)
    except Exception:  # no API access: assume the worst
        return None
    return disruption_of(pod) is not None


def record_head(
    environ: Mapping[str, str], kube_factory: Callable[[str, str], Kube] = KubernetesApi
) -> str:
    """The head's hook: write status.disrupted when its pod is being taken away."""
    namespace = environ.get("RAYTRAIN_TRAINJOB_NAMESPACE")
    trainjob = environ.get("RAYTRAIN_TRAINJOB_NAME")
    pod_name = environ.get("RAYTRAIN_POD_NAME")
    attempt = environ.get("RAYTRAIN_ATTEMPT", "")
    if not (namespace and trainjob and pod_name and attempt.isdigit()):
        return "RAYTRAIN_TRAINJOB_NAMESPACE/NAME, RAYTRAIN_POD_NAME or RAYTRAIN_ATTEMPT unset"
    try:
        kube = kube_factory(namespace, trainjob)
        seen = disruption_of(kube.read_pod(namespace, pod_name))
        if seen is None:
            return f"pod {pod_name} is deleted, not disrupted: nothing recorded"
        record = {"attempt": int(attempt), "pod": pod_name, **seen}
        kube.patch_status({"status": {"disrupted": record}})
    except Exception as exc:  # the hook must never block the delete
        return f"recording the disruption failed ({type(exc).__name__}: {exc})"
    return f"recorded {seen['reason']} of head pod {pod_name} (attempt {attempt})"


def main(argv: Iterable[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        said = record_head(os.environ) if "--head" in args else run(os.environ)
    except Exception as exc:  # never fail the preStop hook
        said = f"the drain hook failed ({type(exc).__name__}: {exc})"
    print(said, file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
