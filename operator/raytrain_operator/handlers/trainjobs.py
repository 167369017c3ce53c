"""kopf handlers of TrainJobs: create, resume, update and delete.

Every handler runs the same level-triggered reconcile pass; they differ only in what wakes them
up. Everything else that runs a pass goes through one queue (handlers/wake.py): a RayJob's
change, the runtime's report, a time a plan names, and the resync, one interval after a job's
last pass while the operator still has work on it. Children are owned by the TrainJob
(ownerReferences), so deleting it lets Kubernetes' garbage collector remove them; the operator
only forgets what it kept of the job when its DELETED event arrives (handlers/wake.py).

No handler needs a finalizer, so kopf puts none on a TrainJob, handles a new one at its first
event, and takes off the finalizer that earlier versions put there (settings.FINALIZER, while a
per-job resync timer ran) the first time it sees the object: deleting a TrainJob or its
namespace never waits for the operator.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import kopf

from raytrain_contract.api.v1alpha1 import GROUP, PLURAL, VERSION
from raytrain_operator import metrics
from raytrain_operator.handlers.reconcile import reconcile
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
