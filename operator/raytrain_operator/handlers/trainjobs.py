"""kopf handlers of TrainJobs: create, resume, update, delete, and a periodic resync.

Every handler runs the same level-triggered reconcile pass; they differ only in what wakes them
up. Children are owned by the TrainJob (ownerReferences), so deleting it lets Kubernetes'
garbage collector remove them and the delete handler has nothing to clean up. kopf still puts
its finalizer (`kopf.raytrain.dev/finalizer`, settings.FINALIZER) on every TrainJob because of
the resync timer, which it stops before letting the object go.
"""

from __future__ import annotations

from typing import Any

import kopf

from raytrain_operator import metrics
from raytrain_operator.api.v1alpha1 import GROUP, PLURAL, VERSION
from raytrain_operator.handlers.reconcile import reconcile
from raytrain_operator.settings import CONFIG
from raytrain_operator.status import machine


def _retry_if_stalled(plan: machine.Plan) -> None:
    """Change handlers retry a stalled TrainJob so that fixing the cause unblocks it."""
    if plan.phase == machine.STALLED:
        raise kopf.TemporaryError(
            "waiting for the problem in status.conditions[Stalled] to be fixed",
            delay=CONFIG.preflight_retry_seconds,
        )


@kopf.on.create(GROUP, VERSION, PLURAL, id="create")
@kopf.on.resume(GROUP, VERSION, PLURAL, id="resume")
@kopf.on.update(GROUP, VERSION, PLURAL, id="update", field="spec")
def on_change(
    reason: str,
    body: kopf.Body,
    patch: kopf.Patch,
    logger: kopf.Logger,
    rayjobs: kopf.Index[Any, Any] | None = None,
    rayclusters: kopf.Index[Any, Any] | None = None,
    **_: Any,
) -> None:
    """Creation, a spec change and the operator's start: one pass, labelled by what woke it.

    The ids stay those of the three handlers this replaced: kopf stores handler progress under
    them, so a retry that was under way at an upgrade carries on.
    """
    handler = kopf.Reason(reason).value
    _retry_if_stalled(reconcile(handler, body, patch, logger, rayjobs, rayclusters))


@kopf.timer(
    GROUP,
    VERSION,
    PLURAL,
    id="resync",
    interval=CONFIG.resync_seconds,
    initial_delay=CONFIG.resync_seconds,
)
def resync(
    body: kopf.Body,
    patch: kopf.Patch,
    logger: kopf.Logger,
    rayjobs: kopf.Index[Any, Any] | None = None,
    rayclusters: kopf.Index[Any, Any] | None = None,
    **_: Any,
) -> None:
    reconcile("resync", body, patch, logger, rayjobs, rayclusters)


@kopf.on.delete(GROUP, VERSION, PLURAL, id="delete", optional=True)
def on_delete(namespace: str | None, name: str, logger: kopf.Logger, **_: Any) -> None:
    metrics.observe_trainjob(namespace or "", name, None, frozenset())
    logger.info("TrainJob deleted; Kubernetes garbage-collects its RayJob, ConfigMap and RBAC.")
