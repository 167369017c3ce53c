"""Carry out a Plan's actions on the children, idempotently.

A child is created with a plain create when its name is free, which is the usual case and
costs one request. When the name is taken, the object is read: if it carries this TrainJob's
ownerReference it is ours (made by an earlier pass, or before a restart) and is brought in line
with a server-side apply of the whole child, which corrects drift on every field we set. An
object without our ownerReference belongs to someone else and is never touched: applying it
would adopt it, because server-side apply reports a conflict only for fields that both
managers set, and a foreign ConfigMap's keys need not overlap ours. Deletes too (the TTL
clean-up, a child turned off) touch only an object that carries our ownerReference, and name
the uid they read as a precondition; they tolerate "not found".

Before an attempt's children are created, `fence` reads the TrainJob, its RayJobs and its pods
from the API server itself (not from the watch that woke the pass): a pass whose snapshot is
older than the status, or that would start an attempt while another attempt's RayJob or pods
still exist, creates neither the attempt's contract nor its RayJob nor anything that waits
for them. A child the API server refuses (422, 400, 403) raises `Rejected` with the server's
own message, which the status shows.

Requests that do not depend on each other go out together (`together`: the pass's own thread
and the pass state's pool, each thread with its own connection), in three rounds:
1. the fence's three reads, with the Role and the ServiceAccount: neither names an attempt,
   and the Role must exist before the API server takes a RoleBinding to it;
2. once the fence passed: the contract ConfigMap (it names the attempt and the checkpoint to
   resume from), the RoleBinding, the disruption budget and the NetworkPolicy;
3. the RayJob, once they all exist, so that its pods find them and are never unprotected.
A new TrainJob's RayJob is thus three round trips after the pass starts. The children, their
rounds and which are deleted when turned off come from the registry in builders/children.py.

The first pass of a new TrainJob, run from the body its creation event brought (the engine
drops such bodies when it pauses), has no fence: its status is empty, so no pass has recorded
an attempt, and no RayJob or pod of another attempt of its uid can exist. What the fence would
find is an object of attempt 0 that a pass made before it died, which the create finds taken
and applies over. Its first round is then every child but the RoleBinding (after its Role) and
the RayJob (after all of them): three rounds still, the fence's three reads saved.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import kopf

from raytrain_contract.api.v1alpha1 import TrainJob
from raytrain_contract.meta import (
    ANNOTATION_SUSPENDED_BY_USER,
    LABEL_ATTEMPT,
    LABEL_TRAINJOB,
    Meta,
)
from raytrain_contract.timefmt import parse_rfc3339
from raytrain_operator import k8s, metrics
from raytrain_operator.builders.children import (
    BY_KIND,
    CHILDREN,
    FIRST_ROUND,
    LAST_ROUND,
    SECOND_ROUND,
    ChildContext,
    ChildKind,
    build_children,
    owned_by,
)
from raytrain_operator.builders.errors import SpecError
from raytrain_operator.handlers import faults
from raytrain_operator.handlers.state import PassState
from raytrain_operator.k8s import ApiException
from raytrain_operator.status import machine
from raytrain_operator.status.machine import (
    Action,
    Annotate,
    DeleteChildren,
    DeleteRayJob,
    EnsureChildren,
    SetRayJobSuspend,
)


def together(pool: ThreadPoolExecutor, calls: Sequence[Callable[[], Any]]) -> list[Any]:
    """Run the calls at the same time and return their results in order, once all are done;
    if any raised, the first in order's exception is raised (after the others finished). The
    first call runs on the calling thread, the others on the pool."""
    if len(calls) <= 1:
        return [call() for call in calls]
    futures = [pool.submit(contextvars.copy_context().run, call) for call in calls[1:]]
    first: Any = None
    error: BaseException | None = None
    try:
        first = calls[0]()
    except Exception as exc:
        error = exc
    errors = [error, *(f.exception() for f in futures)]
    for found in errors:
        if found is not None:
            raise found
    return [first, *(f.result() for f in futures)]


class Conflict(Exception):
    """A child's name is taken by an object the TrainJob does not own; it is left alone."""


class Rejected(Exception):
    """The API server refused a child, or the builders could not make one (InvalidSpec for
    the spec's problem, OperatorError for a builder's bug)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


class Fenced(Exception):
    """The pass must not create this attempt's children (its snapshot is stale, or another
    attempt's RayJob still exists); no contract and no RayJob were written (at most the Role
    and the ServiceAccount, which name no attempt) and the next pass decides again."""


#: API answers to a create or apply that no retry of the same body can change.
_REFUSALS = {400: "ChildRejected", 403: "ChildForbidden", 422: "ChildRejected"}


def _refused(exc: ApiException, body: dict[str, Any]) -> Rejected:
    kind, name = body["kind"], body["metadata"]["name"]
    message = k8s.api_message(exc)
    if exc.status == 404 and kind == "RayJob":
        return Rejected(
            "KubeRayMissing",
            f"creating RayJob {name} failed with 404 ({message}): the ray.io/v1 RayJob API is "
            "not served here; install the KubeRay operator and its CRDs",
        )
    # An admission webhook's denial (Kueue's, a policy engine's) usually comes as 403 too; it is
    # about the object, not the operator's permissions.
    webhook = "admission webhook" in message
    if kind == "RayJob" and "workload slic" in message.lower():
        # Kueue's webhook, when its ElasticJobsViaWorkloadSlices gate is off, refuses a queued
        # RayJob that runs Ray's autoscaler.
        fix = (
            "spec.scaling.kueueWorkloadSlices needs Kueue's ElasticJobsViaWorkloadSlices "
            "feature gate, which this cluster's Kueue has off (on by default from Kueue 0.18); "
            "turn it on in Kueue's configuration, or remove kueueWorkloadSlices "
            "(the job then asks Kueue for maxWorkers and runs at that size)"
        )
    elif exc.status == 403 and not webhook:
        fix = "the operator lacks a permission it needs; grant it (see the chart's RBAC)"
    elif webhook:
        fix = (
            "an admission webhook of the cluster refused it; change the TrainJob field the "
            "webhook names, or ask the cluster's administrators about its policy"
        )
    else:
        fix = "fix the TrainJob field it comes from"
    return Rejected(
        "ChildRejected" if webhook else _REFUSALS.get(int(exc.status or 0), "ChildRejected"),
        f"the API server refused {kind} {name} ({exc.status}): {message}; {fix}",
    )


def _owned(obj: Mapping[str, Any], meta: Meta) -> bool:
    return owned_by(obj, meta)


def _ensure(body: dict[str, Any], meta: Meta) -> bool:
    """Create a child, or apply it over the one we own already. True if created."""
    try:
        if k8s.create(body) is not None:
            return True
        kind, name = body["kind"], body["metadata"]["name"]
        existing = k8s.get(kind, meta.namespace, name)
        # None: deleted between the create and the read; the apply creates it again.
        if existing is not None and not BY_KIND[kind].owned(existing, meta):
            raise Conflict(
                f"a {kind} named {name} exists in namespace {meta.namespace} but does not "
                f"belong to this TrainJob (uid {meta.uid}); delete that {kind} or rename the "
                "TrainJob"
            )
        k8s.apply(body)
    except ApiException as exc:
        if exc.status in _REFUSALS or (exc.status == 404 and body["kind"] == "RayJob"):
            raise _refused(exc, body) from exc
        raise
    return False


def _attempt_label(rayjob: Mapping[str, Any]) -> int | None:
    return machine.attempt_of(rayjob)


def fence(pool: ThreadPoolExecutor, meta: Meta, attempt: int) -> None:
    """Raise `Fenced` unless the children of `attempt` may be created now (fresh reads)."""
    selector = f"{LABEL_TRAINJOB}={meta.name}"
    fresh: dict[str, Any] | None
    rayjobs: list[dict[str, Any]]
    pods: list[dict[str, Any]]
    fresh, rayjobs, pods = together(
        pool,
        [
            lambda: k8s.get_trainjob(meta.namespace, meta.name),
            lambda: k8s.list_rayjobs(meta.namespace, selector),
            # The foreground delete removes a RayJob only after its pods; the pods are checked
            # too (when the operator may list them), in case their owner chain was cut.
            lambda: k8s.list_pods(meta.namespace, selector) or [],
        ],
    )
    fresh_uid = ((fresh or {}).get("metadata") or {}).get("uid")
    if fresh is None or (meta.uid and fresh_uid != meta.uid):
        raise Fenced(f"TrainJob {meta.namespace}/{meta.name} (uid {meta.uid}) no longer exists")
    owned = [r for r in rayjobs if _owned(r, meta)]
    highest = max((a for r in owned if (a := _attempt_label(r)) is not None), default=None)
    now_at = machine.current_attempt(fresh.get("status") or {}, highest)
    if now_at != attempt:
        raise Fenced(
            f"the TrainJob is at attempt {now_at} on the API server, this pass saw attempt "
            f"{attempt}: it creates nothing"
        )
    others = sorted(
        str(r["metadata"]["name"]) for r in owned if _attempt_label(r) not in (None, attempt)
    )
    if others:
        raise Fenced(
            f"RayJob {', '.join(others)} of another attempt still exists: attempt {attempt} "
            "starts once it and its pods are gone"
        )
    lingering = sorted(
        str(pod["metadata"]["name"])
        for pod in pods
        if ((pod.get("metadata") or {}).get("labels") or {}).get(LABEL_ATTEMPT)
        not in (None, str(attempt))
    )
    if lingering:
        raise Fenced(
            f"pod {', '.join(lingering[:5])} of another attempt still exists: attempt {attempt} "
            "starts once it is gone"
        )


def ensure_children(
    state: PassState,
    trainjob: TrainJob,
    meta: Meta,
    action: EnsureChildren,
    creation_timestamp: str | None,
    logger: logging.Logger | logging.LoggerAdapter[Any],
    fenced: bool = True,
) -> dict[str, Any] | None:
    """Create or bring in line the children of an attempt (builders/children.py's registry,
    round by round); the RayJob if this call created it. Not `fenced`: the first pass of a new
    TrainJob, from its creation event (see the module's docstring)."""
    config, pool = state.config, state.pool()
    fenced = fenced or action.attempt != 0
    context = ChildContext(
        trainjob,
        meta,
        action.attempt,
        resume_from=action.resume_from,
        suspend=action.suspend,
        avoid_nodes=action.avoid_nodes,
        network_policy=config.network_policy,
        network_ingress=config.network_policy_ingress,
    )
    try:
        bodies = build_children(context)
    except SpecError as exc:
        raise Rejected(faults.INVALID_SPEC, faults.spec_message(exc)) from exc
    except Exception as exc:
        # A bug in the operator, not in the spec: said so, logged once, tried again next pass.
        message = faults.report(state, logger, meta, "building the children", exc)
        raise Rejected(faults.OPERATOR_ERROR, message) from exc

    def write(child: ChildKind) -> Callable[[], Any]:
        return lambda: _write(child, bodies[child.kind], meta)

    def round_of(number: int) -> list[Callable[[], Any]]:
        if not fenced:
            return [write(child) for child in CHILDREN if child.unfenced_round == number]
        return [write(child) for child in CHILDREN if child.round == number]

    if fenced:
        # The fence first: when it raises, its word wins over a child's error (together).
        together(pool, [lambda: fence(pool, meta, action.attempt), *round_of(FIRST_ROUND)])
    else:
        together(pool, round_of(FIRST_ROUND))
    # The API server checks a RoleBinding against its Role's rules: the Role went first.
    together(pool, round_of(SECOND_ROUND))
    (last,) = (child for child in CHILDREN if child.round == LAST_ROUND)
    rayjob = bodies[last.kind]
    if rayjob is None or not _ensure(rayjob, meta):
        return None
    logger.info(f"Created RayJob {rayjob['metadata']['name']} (attempt {action.attempt}).")
    created = parse_rfc3339(creation_timestamp)
    if created is not None and action.attempt == 0:
        elapsed = (machine.now_utc() - created).total_seconds()
        metrics.RAYJOB_CREATION_SECONDS.observe(max(elapsed, 0.0))
    return rayjob


def _write(child: ChildKind, body: dict[str, Any] | None, meta: Meta) -> None:
    """Create or bring in line one child; one turned off (None) is deleted if it is pruned
    (spec.disruption.podDisruptionBudget off: the budget of an earlier attempt goes)."""
    if body is not None:
        _ensure(body, meta)
    elif child.pruned and child.name is not None:
        _delete_if_ours(child, meta, child.name(meta.name))


def _delete_if_ours(child: ChildKind, meta: Meta, name: str) -> None:
    """Delete the object of this kind and name if it is ours (this TrainJob's ownerReference):
    an object of the same name that someone else made is never deleted. The delete names the
    uid that was read, so an object created again in between stays too."""
    found = k8s.get(child.kind, meta.namespace, name)
    if found is None or not child.owned(found, meta):
        return
    uid = (found.get("metadata") or {}).get("uid")
    k8s.delete(child.kind, meta.namespace, name, uid=str(uid) if uid else None)


def delete_children(meta: Meta) -> None:
    """Delete every child of the TrainJob that is ours (its TTL passed): a child per attempt
    found by the TrainJob's label, the others by name."""
    selector = f"{LABEL_TRAINJOB}={meta.name}"
    for child in CHILDREN:
        if child.name is not None:
            _delete_if_ours(child, meta, child.name(meta.name))
            continue
        for name in k8s.list_names(child.kind, meta.namespace, selector):
            _delete_if_ours(child, meta, name)


def run(
    state: PassState,
    actions: list[Action],
    trainjob: TrainJob | None,
    meta: Meta,
    patch: kopf.Patch,
    creation_timestamp: str | None,
    logger: logging.Logger | logging.LoggerAdapter[Any],
    fenced: bool = True,
) -> list[dict[str, Any]]:
    """Carry out the actions; the RayJobs created (their ADDED events bring the pass nothing
    new, the engine records them as seen). Not `fenced`: a new TrainJob's first pass."""
    created: list[dict[str, Any]] = []
    for action in actions:
        if isinstance(action, EnsureChildren):
            if trainjob is not None:
                made = ensure_children(
                    state, trainjob, meta, action, creation_timestamp, logger, fenced
                )
                if made is not None:
                    created.append(made)
        elif isinstance(action, SetRayJobSuspend):
            value = "true" if action.by_user and action.suspend else None
            k8s.patch_rayjob(
                meta.namespace,
                action.name,
                {
                    "metadata": {"annotations": {ANNOTATION_SUSPENDED_BY_USER: value}},
                    "spec": {"suspend": action.suspend},
                },
            )
            logger.info(f"{'Suspended' if action.suspend else 'Resumed'} RayJob {action.name}.")
        elif isinstance(action, DeleteRayJob):
            k8s.delete_rayjob(meta.namespace, action.name)
            logger.info(f"Deleted RayJob {action.name}.")
        elif isinstance(action, DeleteChildren):
            delete_children(meta)
            logger.info("Deleted the children after ttlSecondsAfterFinished.")
        elif isinstance(action, Annotate):
            patch.metadata.annotations[action.key] = action.value
    return created
