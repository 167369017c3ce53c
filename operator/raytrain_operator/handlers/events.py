"""kopf's event handlers of a TrainJob's children: each only queues a pass over the TrainJob.

- One of a TrainJob's RayJobs changes (KubeRay writes the status, the RayJob is being deleted
  or is gone): its TrainJob is queued. An event that shows nothing the last pass has not seen
  (the ADDED event of a RayJob the operator has just created, a change of fields no pass
  reads) queues nothing.
- One of their RayClusters changes what a pass reads of it (worker counts, ReplicaFailure).
- A namespace's labels change whether the operator's namespace selector selects it: each of its
  TrainJobs is queued (handlers/namespaces.py). Watched only when there is a selector.
The TrainJob's own events are handlers/trainjobs.py's.

The handlers are coroutines: what they do takes microseconds, and kopf would hand a plain
function to its thread pool. They reach the engine through kopf's memo (`memo.engine`).
"""

from __future__ import annotations

from typing import Any

import kopf

from raytrain_contract.meta import LABEL_TRAINJOB
from raytrain_operator import metrics
from raytrain_operator.handlers.engine import ORIGINATED_FROM, Engine, cluster_entry
from raytrain_operator.k8s import RAY_GROUP, RAY_VERSION, RAYCLUSTERS, RAYJOBS


def engine_of(memo: Any) -> Engine:
    engine: Engine = memo.engine
    return engine


async def rayjob_changed(
    type: str | None,
    namespace: str | None,
    name: str,
    meta: kopf.Meta,
    body: kopf.Body,
    memo: kopf.Memo,
    **_: Any,
) -> None:
    """A RayJob of a TrainJob changed: that TrainJob is queued."""
    if namespace is None:
        return
    engine = engine_of(memo)
    owner = str(meta.labels[LABEL_TRAINJOB])
    if type == "DELETED":
        engine.seen.rayjob_gone(namespace, name)
        engine.seen.version_gone(RAYJOBS, namespace, name)
    else:
        engine.seen.saw_version(RAYJOBS, meta, owner)
        if type is None or not engine.seen.rayjob_news(namespace, body):
            # The listing at start-up (every TrainJob is resumed anyway), or nothing new.
            return
    metrics.WAKEUPS.labels(cause="rayjob").inc()
    engine.enqueue((namespace, owner))


async def raycluster_changed(
    type: str | None,
    namespace: str | None,
    name: str,
    meta: kopf.Meta,
    status: kopf.Status,
    memo: kopf.Memo,
    **_: Any,
) -> None:
    """A RayCluster of a TrainJob's RayJob changed what a pass reads of it: queued."""
    if namespace is None:
        return
    engine = engine_of(memo)
    owner = str(meta.labels[LABEL_TRAINJOB])
    if type == "DELETED":
        engine.seen.version_gone(RAYCLUSTERS, namespace, name)
    else:
        engine.seen.saw_version(RAYCLUSTERS, meta, owner)
    entry = None if type == "DELETED" else cluster_entry(status)
    news = engine.seen.cluster_news(namespace, name, entry)
    if type is None or not news:
        return  # the listing at start-up, or nothing a pass reads
    metrics.WAKEUPS.labels(cause="raycluster").inc()
    engine.enqueue((namespace, owner))


async def namespace_changed(
    type: str | None, name: str, meta: kopf.Meta, memo: kopf.Memo, **_: Any
) -> None:
    """A namespace's labels: when its selection changes, each of its TrainJobs is queued (one
    opted in is managed from now on; one opted out says so)."""
    engine = engine_of(memo)
    now = engine.namespaces.saw(name, None if type == "DELETED" else dict(meta.labels))
    if now is None:
        return
    engine.namespace_selection_changed(name, now)


def register(registry: kopf.OperatorRegistry, *, select_namespaces: bool = False) -> None:
    kopf.on.event(
        RAY_GROUP,
        RAY_VERSION,
        RAYJOBS,
        labels={LABEL_TRAINJOB: kopf.PRESENT},
        id="wake-trainjob",
        registry=registry,
    )(rayjob_changed)
    kopf.on.event(
        RAY_GROUP,
        RAY_VERSION,
        RAYCLUSTERS,
        labels={LABEL_TRAINJOB: kopf.PRESENT, ORIGINATED_FROM: kopf.PRESENT},
        id="wake-trainjob-cluster",
        registry=registry,
    )(raycluster_changed)
    if select_namespaces:
        kopf.on.event("", "v1", "namespaces", id="namespace-labels", registry=registry)(
            namespace_changed
        )
