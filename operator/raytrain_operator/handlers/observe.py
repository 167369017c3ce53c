"""What a pass reads of a TrainJob's cluster besides the TrainJob: its RayJobs (from the index,
else the API), its RayClusters' worker counts and ReplicaFailure, and, while the cluster starts
or once an attempt failed, its pods. handlers/reconcile.py runs a pass over what these return.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from raytrain_contract.api.v1alpha1 import TrainJob
from raytrain_contract.meta import LABEL_ATTEMPT, LABEL_TRAINJOB, Meta
from raytrain_contract.timefmt import parse_rfc3339
from raytrain_operator import k8s, metrics
from raytrain_operator.handlers.state import PassState
from raytrain_operator.status import machine, triage

#: Pods of a cluster that is still starting are looked at (for Unschedulable) after this long.
UNSCHEDULABLE_CHECK_AFTER_SECONDS = 10.0

#: A starting cluster whose pods showed no problem is looked at again this long after the first
#: look, then twice as long after that, and so on, up to the resync interval apart: a cluster
#: that starts for long costs less and less.
UNSCHEDULABLE_LOOK_AGAIN_SECONDS = 60.0


def owned_rayjobs(index: Any, meta: Meta) -> list[dict[str, Any]]:
    """Every RayJob of this TrainJob (all attempts) from the index, or the API without one."""
    if index is not None:
        found = [dict(v) for v in index.get((meta.namespace, meta.name), ())]
    else:
        found = k8s.list_rayjobs(meta.namespace, f"{LABEL_TRAINJOB}={meta.name}")
    return [r for r in found if _owned(r, meta)]


def _owned(rayjob: Mapping[str, Any], meta: Meta) -> bool:
    refs = (rayjob.get("metadata") or {}).get("ownerReferences") or []
    return any(r.get("uid") == meta.uid for r in refs)


def lookup_rayjob(
    owned: Iterable[Mapping[str, Any]], namespace: str, name: str, *, first_pass: bool = False
) -> dict[str, Any] | None:
    """The RayJob from the in-memory index; the API when the index has not seen it (yet).

    A first pass (the TrainJob has no status yet) asks nobody: no pass has recorded an attempt,
    so the RayJob can only exist if a pass made it and died before its status write. The
    pass then plans to create it, and `apply.fence` and `apply.ensure_children` read the
    server before anything is written: the RayJob found there is ours and is applied over, not
    duplicated. This saves a new TrainJob one round trip before its RayJob.
    """
    for value in owned:
        if (value.get("metadata") or {}).get("name") == name:
            metrics.RAYJOB_LOOKUPS.labels(source="index").inc()
            return dict(value)
    if first_pass:
        metrics.RAYJOB_LOOKUPS.labels(source="first-pass").inc()
        return None
    metrics.RAYJOB_LOOKUPS.labels(source="api").inc()
    return k8s.get_rayjob(namespace, name)


def cluster_problem(
    state: PassState,
    rayjob: Mapping[str, Any],
    index: Any,
    meta: Meta,
    attempt: int,
    now: datetime,
    *,
    trainjob: TrainJob,
) -> tuple[str, str] | None:
    """Why the cluster of a starting RayJob lacks pods: KubeRay's ReplicaFailure (a quota, an
    admission webhook), a pod the scheduler cannot place, or a container the kubelet cannot
    start for a missing Secret, ConfigMap or key, with their own messages. `trainjob`
    gives the memory settings that an OOMKilled message names as they are now."""
    status = rayjob.get("status") or {}
    if status.get("jobDeploymentStatus") not in ("Initializing", "", None):
        return None
    rj_name = (rayjob.get("metadata") or {}).get("name")
    for entry in (index or {}).get((meta.namespace, rj_name), ()):
        failure = entry.get("replicaFailure")
        if failure:
            return (
                "ReplicaFailure",
                f"KubeRay cannot create the pods of RayCluster {entry.get('name')} "
                f"({failure.get('reason')}): {failure.get('message')}",
            )
    started = parse_rfc3339(status.get("startTime"))
    if started is None or (now - started).total_seconds() < UNSCHEDULABLE_CHECK_AFTER_SECONDS:
        return None
    if not state.may_list_pods():
        return None
    selector = f"{LABEL_TRAINJOB}={meta.name},{LABEL_ATTEMPT}={attempt}"
    pods = k8s.list_pods(meta.namespace, selector)
    if pods is None:
        state.pods_forbidden()
        return None
    for pod in pods:
        cond = triage.unschedulable_condition(pod)
        if cond is not None:
            name = (pod.get("metadata") or {}).get("name")
            message = str(cond.get("message") or "no message")
            advice = triage.host_ports_advice(pod, message)
            return (
                "Unschedulable",
                f"pod {name} cannot be scheduled: {message}" + (f"; {advice}" if advice else ""),
            )
    # A Secret, ConfigMap or key the containers need and the kubelet cannot find.
    s3 = trainjob.spec.storage.s3
    missing = triage.config_problem(
        pods, meta.namespace, s3.credentials_secret if s3 is not None else None
    )
    if missing is not None:
        return missing
    # An image that cannot be pulled, a container killed for memory, a node gone.
    found = triage.classify_pods(
        pods,
        (),
        machine.worker_memory(trainjob),
        head_memory=machine.head_memory(trainjob),
    )
    return (found.reason, found.message) if found is not None else None


def attempt_evidence(
    state: PassState, rayjob: Mapping[str, Any], index: Any, meta: Meta, attempt: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The Ray pods of a failed attempt (the builders' labels: TrainJob and attempt) and its
    RayCluster's ReplicaFailure as an Event, for the failure's classification. Read only when
    the attempt failed; no pods when the operator may not list them."""
    rj_name = (rayjob.get("metadata") or {}).get("name")
    events = triage.replica_failure_events(list((index or {}).get((meta.namespace, rj_name), ())))
    if not state.may_list_pods():
        return [], events
    pods = k8s.list_pods(meta.namespace, f"{LABEL_TRAINJOB}={meta.name},{LABEL_ATTEMPT}={attempt}")
    if pods is None:
        state.pods_forbidden()
        return [], events
    return pods, events


def _unschedulable_look(
    rayjob: Mapping[str, Any] | None, now: datetime, longest: float
) -> float | None:
    """Seconds until a starting cluster's pods are looked at: UNSCHEDULABLE_CHECK_AFTER_SECONDS
    after it started, then UNSCHEDULABLE_LOOK_AGAIN_SECONDS after that look, each next wait twice
    the last, at most `longest`. Counted from the start, so a pass an event brings in between
    moves nothing. None when it is not starting."""
    status = (rayjob or {}).get("status") or {}
    started = parse_rfc3339(status.get("startTime"))
    if started is None or status.get("jobDeploymentStatus") != "Initializing":
        return None
    elapsed = (now - started).total_seconds()
    at, wait = UNSCHEDULABLE_CHECK_AFTER_SECONDS, UNSCHEDULABLE_LOOK_AGAIN_SECONDS
    while at <= elapsed - 0.5:
        at += min(wait, longest)
        wait *= 2
    return at - elapsed + 0.5


def with_cluster_workers(rayjob: dict[str, Any], index: Any) -> dict[str, Any]:
    """The RayJob with its cluster's worker counts taken from the RayCluster itself.

    The RayJob's `status.rayClusterStatus` is KubeRay's copy, refreshed only when KubeRay reaches
    the Ray dashboard; the RayCluster's own status is current.
    """
    if index is None:
        return rayjob
    meta = rayjob.get("metadata") or {}
    status = dict(rayjob.get("status") or {})
    for entry in index.get((meta.get("namespace"), meta.get("name")), ()):
        if status.get("rayClusterName") not in (None, entry["name"]):
            continue
        cluster = dict(status.get("rayClusterStatus") or {})
        for key in ("desiredWorkerReplicas", "readyWorkerReplicas"):
            if entry.get(key) is not None:
                cluster[key] = entry[key]
        return {**rayjob, "status": {**status, "rayClusterStatus": cluster}}
    return rayjob
