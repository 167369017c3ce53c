"""In-memory indexes of the RayJobs we own and of their RayClusters, so that a reconcile pass
reads neither from the API server: the watches keep them current, and KubeRay's status changes
land in them.

kopf hands an index to every handler as the keyword argument named after its id: `rayjobs`,
`rayclusters`. The RayCluster index holds only the worker counts: the RayJob carries a copy of
its cluster's status, but KubeRay refreshes that copy only on a successful poll of the Ray
dashboard, so it can lag behind the RayCluster's own status.
"""

from __future__ import annotations

from typing import Any

import kopf

from raytrain_operator.builders.meta import LABEL_TRAINJOB
from raytrain_operator.k8s import RAY_GROUP, RAY_VERSION, RAYCLUSTERS, RAYJOBS

#: KubeRay's label on a RayCluster made for a RayJob: the RayJob's name.
ORIGINATED_FROM = "ray.io/originated-from-cr-name"


@kopf.index(RAY_GROUP, RAY_VERSION, RAYJOBS, labels={LABEL_TRAINJOB: kopf.PRESENT}, id="rayjobs")
def rayjobs_by_name(
    namespace: str | None,
    name: str,
    meta: kopf.Meta,
    spec: kopf.Spec,
    status: kopf.Status,
    **_: Any,
) -> dict[tuple[str | None, str], dict[str, Any]]:
    return {
        (namespace, name): {
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": dict(meta.labels),
                "annotations": dict(meta.annotations),
                "ownerReferences": [dict(r) for r in meta.get("ownerReferences", [])],
            },
            "spec": {"suspend": bool(spec.get("suspend", False))},
            "status": _plain(dict(status)),
        }
    }


@kopf.index(
    RAY_GROUP,
    RAY_VERSION,
    RAYCLUSTERS,
    labels={LABEL_TRAINJOB: kopf.PRESENT, ORIGINATED_FROM: kopf.PRESENT},
    id="rayclusters",
)
def rayclusters_by_rayjob(
    namespace: str | None, name: str, meta: kopf.Meta, status: kopf.Status, **_: Any
) -> dict[tuple[str | None, str], dict[str, Any]]:
    """RayJob name -> its RayCluster's name and worker counts."""
    return {
        (namespace, str(meta.labels[ORIGINATED_FROM])): {
            "name": name,
            "desiredWorkerReplicas": status.get("desiredWorkerReplicas"),
            "readyWorkerReplicas": status.get("readyWorkerReplicas"),
        }
    }


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value
