"""In-memory indexes of the RayJobs we own and of their RayClusters, so that a reconcile pass
reads neither from the API server: the watches keep them current, and KubeRay's status changes
land in them.

kopf hands an index to every handler as the keyword argument named after its id: `rayjobs`,
`rayclusters`. RayJobs are keyed by their TrainJob (namespace and the `raytrain.dev/trainjob`
label), so one look-up finds every attempt of a job: the next attempt is created only once the
earlier ones are gone. The RayCluster index holds the worker counts and KubeRay's
ReplicaFailure condition: the RayJob carries a copy of its cluster's status, but KubeRay
refreshes that copy only on a successful poll of the Ray dashboard, so it can lag behind the
RayCluster's own status. The index functions are coroutines: they take microseconds, and kopf
hands a plain function to its thread pool, one hop per event.
"""

from __future__ import annotations

from typing import Any

import kopf

from raytrain_contract.meta import LABEL_TRAINJOB
from raytrain_operator.k8s import RAY_GROUP, RAY_VERSION, RAYCLUSTERS, RAYJOBS

#: KubeRay's label on a RayCluster made for a RayJob: the RayJob's name.
ORIGINATED_FROM = "ray.io/originated-from-cr-name"


#: KubeRay's RayCluster condition while it cannot create or delete pods (quota, admission).
REPLICA_FAILURE = "ReplicaFailure"


async def rayjobs_by_trainjob(
    namespace: str | None,
    name: str,
    meta: kopf.Meta,
    spec: kopf.Spec,
    status: kopf.Status,
    **_: Any,
) -> dict[tuple[str | None, str], dict[str, Any]]:
    """(namespace, TrainJob name) -> each of its RayJobs, as much of it as a pass reads."""
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": dict(meta.labels),
        "annotations": dict(meta.annotations),
        "ownerReferences": [dict(r) for r in meta.get("ownerReferences", [])],
    }
    if meta.get("deletionTimestamp"):
        metadata["deletionTimestamp"] = meta["deletionTimestamp"]
    return {
        (namespace, str(meta.labels[LABEL_TRAINJOB])): {
            "metadata": metadata,
            "spec": {"suspend": bool(spec.get("suspend", False))},
            "status": _plain(dict(status)),
        }
    }


async def rayclusters_by_rayjob(
    namespace: str | None, name: str, meta: kopf.Meta, status: kopf.Status, **_: Any
) -> dict[tuple[str | None, str], dict[str, Any]]:
    """RayJob name -> its RayCluster's name, worker counts and ReplicaFailure (or None)."""
    failure = None
    for cond in status.get("conditions") or []:
        if cond.get("type") == REPLICA_FAILURE and cond.get("status") == "True":
            failure = {"reason": cond.get("reason"), "message": cond.get("message")}
    return {
        (namespace, str(meta.labels[ORIGINATED_FROM])): {
            "name": name,
            "desiredWorkerReplicas": status.get("desiredWorkerReplicas"),
            "readyWorkerReplicas": status.get("readyWorkerReplicas"),
            "replicaFailure": failure,
        }
    }


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def register(registry: kopf.OperatorRegistry) -> None:
    kopf.index(
        RAY_GROUP,
        RAY_VERSION,
        RAYJOBS,
        labels={LABEL_TRAINJOB: kopf.PRESENT},
        id="rayjobs",
        registry=registry,
    )(rayjobs_by_trainjob)
    kopf.index(
        RAY_GROUP,
        RAY_VERSION,
        RAYCLUSTERS,
        labels={LABEL_TRAINJOB: kopf.PRESENT, ORIGINATED_FROM: kopf.PRESENT},
        id="rayclusters",
        registry=registry,
    )(rayclusters_by_rayjob)
