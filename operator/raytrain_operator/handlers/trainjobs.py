"""kopf handlers of TrainJobs: created, resumed (at the operator's start), a new spec.

Each only queues the TrainJob on the engine (handlers/engine.py), which runs the pass; they
differ in the cause the pass is labelled with. A new TrainJob's pass starts from the body its
creation event brought, without reading it again. Children are owned by the TrainJob
(ownerReferences), so deleting it lets Kubernetes' garbage collector remove them; the engine
only forgets what it kept of the job when its DELETED event arrives (handlers/events.py).

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
from raytrain_operator.handlers.events import engine_of
from raytrain_operator.status import machine


def on_change(
    reason: str,
    namespace: str | None,
    name: str,
    body: kopf.Body,
    memo: kopf.Memo,
    **_: Any,
) -> None:
    """Creation, a spec change and the operator's start: the TrainJob is queued, its pass
    labelled with the cause.

    Three registrations of one function, each with an explicit id: kopf stores a handler's
    progress under its id, and logs name it ("Handler 'create' succeeded").
    """
    if namespace is None:
        return
    # str(): kopf.Reason is an enum.StrEnum from kopf 1.45 (Python 3.11+), a (str, Enum) in
    # the 1.44 that Python 3.10 gets; both print as their value.
    cause = str(kopf.Reason(reason))
    created = dict(body) if cause == str(kopf.Reason.CREATE) else None
    engine_of(memo).enqueue((namespace, name), cause, created=created)


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


def trainjob_states(
    namespace: str | None, name: str, status: kopf.Status, **_: Any
) -> dict[tuple[str | None, str], metrics.TrainJobState]:
    """Every TrainJob's state, kept by the watch: the metrics collector reads it at scrape."""
    return {(namespace, name): trainjob_state(status, namespace, name)}


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


def register(registry: kopf.OperatorRegistry) -> None:
    kopf.on.create(GROUP, VERSION, PLURAL, id="create", registry=registry)(on_change)
    kopf.on.resume(GROUP, VERSION, PLURAL, id="resume", registry=registry)(on_change)
    kopf.on.update(GROUP, VERSION, PLURAL, id="update", field="spec", registry=registry)(on_change)
    kopf.index(GROUP, VERSION, PLURAL, id="trainjob_states", registry=registry)(trainjob_states)
    kopf.on.startup(id="metrics", registry=registry)(serve_trainjob_metrics)
