"""kopf handlers of TrainJobs: create, resume, update, delete, and a periodic resync.

Every handler runs the same level-triggered reconcile pass; they differ only in what wakes them
up (a RayJob's change and a time a plan names wake a pass too: handlers/wake.py). Children are
owned by the TrainJob (ownerReferences), so deleting it lets Kubernetes' garbage collector
remove them and the delete handler (optional) needs no finalizer.

The finalizer (`kopf.raytrain.dev/finalizer`, settings.FINALIZER) exists only because of the
resync timer: kopf blocks the deletion of an object while a timer of it runs. The timer is
limited (`when=`) to jobs the operator still has work on (machine.needs_operator): not
finished, or finished with a TTL clean-up to do. kopf adds its finalizer only to objects a timer
matches, stops the timer and removes the finalizer when an object stops matching: a finished job
carries no finalizer, and deleting it (or its namespace) never waits for the operator.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import kopf

from raytrain_operator import metrics
from raytrain_operator.api import templates
from raytrain_operator.api.v1alpha1 import GROUP, PLURAL, VERSION
from raytrain_operator.handlers.reconcile import forget, reconcile
from raytrain_operator.handlers.wake import WAKER
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
    """Creation, a spec change and the operator's start: one pass, labelled with the cause.

    Three registrations of one function, each with an explicit id: kopf stores a handler's
    progress under its id, and logs name it ("Handler 'create' succeeded").
    """
    handler = kopf.Reason(reason).value
    WAKER.capture(rayjobs, rayclusters)
    _retry_if_stalled(reconcile(handler, body, patch, logger, rayjobs, rayclusters))


def needs_operator(status: kopf.Status, spec: kopf.Spec, meta: kopf.Meta, **_: Any) -> bool:
    """The resync timer's filter: this job is not finished, or its TTL clean-up is pending."""
    ttl = templates.effective_value(spec, status, "ttlSecondsAfterFinished")
    return machine.needs_operator(status, ttl, meta.get("annotations") or {})


@kopf.timer(
    GROUP,
    VERSION,
    PLURAL,
    id="resync",
    interval=CONFIG.resync_seconds,
    initial_delay=CONFIG.resync_seconds,
    when=needs_operator,
)
def resync(
    body: kopf.Body,
    patch: kopf.Patch,
    logger: kopf.Logger,
    rayjobs: kopf.Index[Any, Any] | None = None,
    rayclusters: kopf.Index[Any, Any] | None = None,
    **_: Any,
) -> None:
    WAKER.capture(rayjobs, rayclusters)
    reconcile("resync", body, patch, logger, rayjobs, rayclusters)


@kopf.on.delete(GROUP, VERSION, PLURAL, id="delete", optional=True)
def on_delete(logger: kopf.Logger, uid: str | None = None, **_: Any) -> None:
    if uid:
        forget(uid)
    logger.info("TrainJob deleted; Kubernetes garbage-collects its RayJob, ConfigMap and RBAC.")


def trainjob_state(
    status: Mapping[str, Any], namespace: str | None = None, name: str = ""
) -> metrics.TrainJobState:
    """A TrainJob's phase, True condition types and per-job gauge values, as its status on the
    API server says."""
    phase = str(status.get("phase") or machine.PENDING)
    true_conditions = frozenset(
        str(c.get("type")) for c in status.get("conditions") or [] if c.get("status") == "True"
    )
    return metrics.TrainJobState(
        phase, true_conditions, namespace or "", name, metrics.job_values(status)
    )


@kopf.index(GROUP, VERSION, PLURAL, id="trainjob_states")
def trainjob_states(
    namespace: str | None, name: str, status: kopf.Status, **_: Any
) -> dict[tuple[str | None, str], metrics.TrainJobState]:
    """Every TrainJob's state, kept by the watch: the metrics collector reads it at scrape."""
    return {(namespace, name): trainjob_state(status, namespace, name)}


@kopf.on.startup(id="metrics")
def serve_trainjob_metrics(
    trainjob_states: kopf.Index[tuple[str | None, str], metrics.TrainJobState] | None = None,
    **_: Any,
) -> None:
    # kopf passes every index to start-up handlers, empty at first and filled by the watch;
    # the default only satisfies the type of a start-up handler.
    index = trainjob_states if trainjob_states is not None else {}

    def states() -> list[metrics.TrainJobState]:
        return [state for store in index.values() for state in store]

    metrics.watch_trainjobs(states)
