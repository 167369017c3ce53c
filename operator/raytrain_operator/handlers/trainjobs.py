"""kopf's handler of TrainJob events, and the index of their states that the metrics read.

Every event of a TrainJob comes to `trainjob_changed`, which only queues a pass on the engine
(handlers/engine.py), labelled with what brought it:
- `create`: a new TrainJob (its ADDED event). Its first pass starts from the body the event
  brought, without reading it again (and without the fence, handlers/apply.py).
- `resume`: one listed when the watch starts (the operator's start, the end of a pause, a watch
  that lost its place), which no pass has read or which changed since.
- `update`: a new spec (its generation is past the one the status observed).
- `wake`: a new runtime report, or a status someone else changed: a MODIFIED event whose status
  differs from what the last pass read and wrote. The operator's own writes queue nothing.
A job the operator has no more work on (finished, its TTL clean-up done) queues nothing. The
engine forgets what it kept of a TrainJob when its DELETED event arrives.

kopf's change handlers (on.create, on.update, on.resume) are not used: they keep the last
handled spec in an annotation, which costs a write and one more event per TrainJob and a diff
of every event, where the engine's own memory of what the last pass read tells the same.
Children are owned by the TrainJob (ownerReferences), so deleting it lets Kubernetes' garbage
collector remove them. No handler needs a finalizer, so kopf puts none on a TrainJob, and
deleting a TrainJob or its namespace never waits for the operator.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import kopf

from raytrain_contract.api.v1alpha1 import GROUP, PLURAL, VERSION
from raytrain_operator import metrics
from raytrain_operator.handlers.events import engine_of
from raytrain_operator.handlers.reconcile import needs_operator
from raytrain_operator.status import machine


def cause_of(type_: str | None, body: Mapping[str, Any]) -> str:
    """What a TrainJob event that brings news queues a pass for (the module says each)."""
    if type_ is None:
        return "resume"
    if type_ == "ADDED":
        return "create"
    metadata = body.get("metadata") or {}
    observed = (body.get("status") or {}).get("observedGeneration")
    generation = metadata.get("generation")
    if isinstance(generation, int) and isinstance(observed, int) and generation > observed:
        return "update"
    return "wake"


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
    """Any event of a TrainJob: queued when it brings something no pass has read."""
    if namespace is None:
        return
    engine = engine_of(memo)
    if type == "DELETED":
        engine.forget(namespace, name, uid)
        logger.info("TrainJob deleted; Kubernetes garbage-collects its RayJob, ConfigMap and RBAC.")
        return
    engine.seen.saw_version(PLURAL, meta, str(uid or ""))
    if not needs_operator(spec, status, meta.get("annotations") or {}):
        return
    if not engine.seen.trainjob_news(body):
        return
    cause = cause_of(type, body)
    metrics.WAKEUPS.labels(cause="report" if cause == "wake" else cause).inc()
    # Only a new TrainJob's creation hands its body over: any later event means the pass
    # reads it as it is then.
    created = dict(body) if type == "ADDED" and not status else None
    engine.enqueue((namespace, name), cause, created=created)


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


async def trainjob_states(
    namespace: str | None, name: str, status: kopf.Status, **_: Any
) -> dict[tuple[str | None, str], metrics.TrainJobState]:
    """Every TrainJob's state, kept by the watch: the metrics collector reads it at scrape.
    A coroutine: it takes microseconds, and kopf hands a plain function to its thread pool."""
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
    kopf.on.event(GROUP, VERSION, PLURAL, id="trainjob-event", registry=registry)(trainjob_changed)
    kopf.index(GROUP, VERSION, PLURAL, id="trainjob_states", registry=registry)(trainjob_states)
    kopf.on.startup(id="metrics", registry=registry)(serve_trainjob_metrics)
