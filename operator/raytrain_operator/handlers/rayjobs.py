"""An in-memory index of the RayJobs we own, so that a reconcile pass reads no RayJob from
the API server: the watch keeps the index current, and KubeRay's status changes land in it.

kopf hands the index to every handler as the keyword argument named after its id, `rayjobs`.
"""

from __future__ import annotations

from typing import Any

import kopf

from raytrain_operator.builders.meta import LABEL_TRAINJOB
from raytrain_operator.k8s import RAY_GROUP, RAY_VERSION, RAYJOBS


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


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value
