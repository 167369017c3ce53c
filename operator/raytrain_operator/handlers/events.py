"""kopf's event handlers of the children and of TrainJob status: each only queues a pass.

- One of a TrainJob's RayJobs changes (KubeRay writes the status, the RayJob is being deleted
  or is gone): its TrainJob is queued. An event that shows nothing the last pass has not seen
  (the ADDED event of a RayJob the operator has just created, a change of fields no pass
  reads) queues nothing.
- One of their RayClusters changes what a pass reads of it (worker counts, ReplicaFailure).
- The runtime's report (`status.trainerStatus`) changes, or someone else changes the status the
  operator wrote: a MODIFIED event of the TrainJob whose status differs from what the last pass
  read and wrote (kopf's change handlers react to the spec only). The TrainJob is gone: what
  the engine kept of it is dropped.

The handlers are coroutines: what they do takes microseconds, and kopf would hand a plain
function to its thread pool. They reach the engine through kopf's memo (`memo.engine`).
"""

from __future__ import annotations

from typing import Any

import kopf

from raytrain_contract.api.v1alpha1 import GROUP, PLURAL, VERSION
from raytrain_contract.meta import LABEL_TRAINJOB
from raytrain_operator import metrics
from raytrain_operator.handlers.engine import ORIGINATED_FROM, Engine, cluster_entry
from raytrain_operator.handlers.reconcile import needs_operator
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
    elif type is None or not engine.seen.rayjob_news(namespace, body):
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
    entry = None if type == "DELETED" else cluster_entry(status)
    news = engine.seen.cluster_news(namespace, name, entry)
    if type is None or not news:
        return  # the listing at start-up, or nothing a pass reads
    metrics.WAKEUPS.labels(cause="raycluster").inc()
    engine.enqueue((namespace, str(meta.labels[LABEL_TRAINJOB])))


async def trainjob_changed(
    type: str | None,
    namespace: str | None,
    name: str,
    body: kopf.Body,
    status: kopf.Status,
    spec: kopf.Spec,
    meta: kopf.Meta,
    logger: kopf.Logger,
    memo: kopf.Memo,
    uid: str | None = None,
    **_: Any,
) -> None:
    """The runtime wrote a new report, or someone else changed what the operator wrote: the
    TrainJob is queued (its own status writes and kopf's annotations queue nothing). The
    TrainJob is gone: what the engine kept of it is dropped."""
    if namespace is None:
        return
    engine = engine_of(memo)
    if type == "DELETED":
        engine.forget(namespace, name, uid)
        logger.info("TrainJob deleted; Kubernetes garbage-collects its RayJob, ConfigMap and RBAC.")
    elif (
        type == "MODIFIED"
        and needs_operator(spec, status, meta.get("annotations") or {})
        and engine.seen.trainjob_news(body, known_only=True)
    ):
        metrics.WAKEUPS.labels(cause="report").inc()
        engine.enqueue((namespace, name))


def register(registry: kopf.OperatorRegistry) -> None:
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
    kopf.on.event(GROUP, VERSION, PLURAL, id="trainjob-event", registry=registry)(trainjob_changed)
