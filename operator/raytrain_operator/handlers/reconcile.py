"""One reconcile pass: observe, plan (pure), act on the children, and say what was decided.

`reconcile` returns a `PassResult`: the plan, the status patch to write, when the job is next
due and why, the Events to post, and what the pass read (its RayJobs, the TrainJob). It neither
writes the TrainJob nor schedules anything: the engine (handlers/engine.py) does both, through
its one write path and its one queue, which also keeps passes over one TrainJob from running at
once. The attempt a pass works on is derived from the RayJobs that exist as well as from the
status, so a lost status patch cannot send it back. What a pass reads of the cluster (RayJobs,
RayClusters, pods) is in handlers/observe.py, whose names are importable from here as before.
"""

from __future__ import annotations

import dataclasses
import http.client
import logging
import ssl
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeAlias

import kopf
from pydantic import ValidationError

from raytrain_contract.api import templates
from raytrain_contract.api.v1alpha1 import TrainJob
from raytrain_contract.meta import Meta
from raytrain_operator import k8s, metrics
from raytrain_operator.builders.contract import build_contract_configmap
from raytrain_operator.builders.errors import SpecError
from raytrain_operator.builders.names import name_problems, rayjob_name
from raytrain_operator.builders.rayjob import build_rayjob
from raytrain_operator.builders.rbac import build_rbac
from raytrain_operator.handlers import apply, faults, preflight
from raytrain_operator.handlers import templates as template_reader
from raytrain_operator.handlers.observe import (
    UNSCHEDULABLE_CHECK_AFTER_SECONDS as UNSCHEDULABLE_CHECK_AFTER_SECONDS,
)
from raytrain_operator.handlers.observe import (
    UNSCHEDULABLE_LOOK_AGAIN_SECONDS as UNSCHEDULABLE_LOOK_AGAIN_SECONDS,
)
from raytrain_operator.handlers.observe import _unschedulable_look as _unschedulable_look
from raytrain_operator.handlers.observe import attempt_evidence as attempt_evidence
from raytrain_operator.handlers.observe import cluster_problem as cluster_problem
from raytrain_operator.handlers.observe import lookup_rayjob as lookup_rayjob
from raytrain_operator.handlers.observe import owned_rayjobs as owned_rayjobs
from raytrain_operator.handlers.observe import with_cluster_workers as with_cluster_workers
from raytrain_operator.handlers.state import PassState
from raytrain_operator.status import conditions, machine, triage

if TYPE_CHECKING:
    Logger: TypeAlias = logging.Logger | logging.LoggerAdapter[Any]
else:  # LoggerAdapter takes a subscript at run time from Python 3.11 only
    Logger = logging.Logger | logging.LoggerAdapter
LOG = logging.getLogger("raytrain_operator.reconcile")

#: A pass that found its picture out of date runs again this much later.
FENCED_RETRY_SECONDS = 1.0

#: A pass that could not reach the API server (connection refused or reset, TLS cut short, 429,
#: 5xx: a restart or an overload) is retried this soon. kopf's own delay for an unexpected error
#: is 60 s, which after an API server restart left jobs unattended for a minute.
API_RETRY_SECONDS = 2.0
TRANSIENT_STATUSES = frozenset({429, 500, 502, 503, 504})
_TRANSPORT_ERRORS = (ConnectionError, TimeoutError, ssl.SSLError, http.client.HTTPException)


@dataclasses.dataclass(frozen=True)
class Event:
    """A Kubernetes Event the engine posts on the TrainJob once the pass's status is written."""

    warning: bool
    reason: str
    message: str


@dataclasses.dataclass
class PassResult:
    """What one pass decided and saw. The engine writes `patch`, posts `events`, records what
    was seen, and queues the job again in `due_in` seconds (None: nothing is due; an event or
    the resync of the whole set brings it back)."""

    plan: machine.Plan
    patch: kopf.Patch
    due_in: float | None = None
    #: Why the job is due then: "due" (a deadline, grace period, TTL, a first look at pods),
    #: "fenced" (its picture was out of date), "stalled" (a problem to re-check).
    due_why: str = ""
    events: list[Event] = dataclasses.field(default_factory=list)
    #: The RayJobs the pass read or created: their next event is news only if it differs.
    seen_rayjobs: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    #: False: nothing may be written (the pass was fenced; the next one decides again).
    write: bool = True

    def due(self, seconds: float | None, why: str) -> None:
        """Due in `seconds` (the earliest of several wins)."""
        if seconds is None:
            return
        if self.due_in is None or seconds < self.due_in:
            self.due_in, self.due_why = max(seconds, 0.0), why


def needs_operator(
    spec: Mapping[str, Any], status: Mapping[str, Any], annotations: Mapping[str, Any]
) -> bool:
    """machine.needs_operator with the TTL the job runs under (its own, or its template's)."""
    ttl = templates.effective_value(spec, status, "ttlSecondsAfterFinished")
    return machine.needs_operator(status, ttl, annotations)


def parse_cached(
    state: PassState,
    body: Mapping[str, Any],
    template: Mapping[str, Any] | None = None,
    logger: Logger = LOG,
) -> tuple[TrainJob | None, str | None, str]:
    """parse(), once per uid and generation (and labels and annotations, which the builders
    copy, and the template's version): the spec of one generation never changes. A pass must
    not change the model. Returns the model, the problem and its Stalled reason: InvalidSpec
    for the spec's problem, OperatorError for a builder's bug (logged, never kept: the next
    pass builds again)."""
    metadata = body.get("metadata") or {}
    snap = template or {}
    # Hashes, not the strings: the key must not keep old annotations (kopf's copy of the
    # spec among them) alive.
    key = (
        metadata.get("uid"),
        metadata.get("generation"),
        metadata.get("name"),
        hash(tuple(sorted((metadata.get("labels") or {}).items()))),
        hash(tuple(sorted((metadata.get("annotations") or {}).items()))),
        snap.get("kind"),
        snap.get("name"),
        snap.get("uid"),
        snap.get("resourceVersion"),
    )
    try:
        result: tuple[TrainJob | None, str | None] = state.parsed_get(
            key, lambda: parse(body, snap.get("spec") or {})
        )
    except faults.BuilderBug as bug:
        meta = Meta.from_metadata(body["metadata"])
        message = faults.report(state, logger, meta, "building the children", bug.error)
        return bug.trainjob, message, faults.OPERATOR_ERROR
    return result[0], result[1], faults.INVALID_SPEC


def parse(
    body: Mapping[str, Any], template: Mapping[str, Any] | None = None
) -> tuple[TrainJob | None, str | None]:
    """The TrainJob model of ``body`` (its spec: the TrainJob's own, ``template``'s spec
    merged in), or the reason the spec cannot be used (names the field, and the template when
    the field came from it). Raises `faults.BuilderBug` when a builder breaks on it."""
    own = dict(body.get("spec") or {})
    template = template or {}
    spec = templates.merge(template, own) if template else own
    try:
        trainjob = TrainJob.model_validate(
            {"metadata": dict(body.get("metadata") or {}), "spec": spec}
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = tuple(first["loc"])
        where = ".".join(str(p) for p in loc)
        origin = templates.field_origin(own, template, loc[1:] if loc[:1] == ("spec",) else loc)
        fix = "fix this field of the template" if origin else "fix this field of the TrainJob"
        return None, f"{where}{origin}: {first['msg']}; {fix}"
    if template:
        # The API server checked the job's own spec, not the merge (api/rules.py). Imported
        # here: cel-python is loaded only once a job names a template.
        from raytrain_operator.api import rules

        broken = rules.check(own, template)
        if broken:
            reference = templates.reference(own) or ("template", "")
            return trainjob, rules.explain(broken[0], reference)
    meta = Meta.from_metadata(body["metadata"])
    problems = name_problems(meta.name)
    if problems:
        return trainjob, problems[0]
    try:
        build_rayjob(trainjob, meta, 0, suspend=False)
        build_contract_configmap(trainjob, meta, 0)
        build_rbac(trainjob, meta)
    except SpecError as exc:
        return trainjob, faults.spec_message(exc)
    except Exception as exc:
        # Anything else is a bug in the operator, not in the spec (handlers/faults.py).
        raise faults.BuilderBug(trainjob, exc) from exc
    return trainjob, None


def announce_failure(meta: Meta, attempt: int, found: triage.Triage) -> Event:
    """One Event (reason: the class) and one count per failed attempt."""
    message = f"attempt {attempt} failed ({found.kind}): {found.message}"
    metrics.ATTEMPT_FAILURES.labels(
        namespace=meta.namespace, trainjob=meta.name, reason=found.reason
    ).inc()
    return Event(True, found.reason, message[: conditions.MAX_MESSAGE])


def reconcile(
    state: PassState,
    cause: str,
    body: Mapping[str, Any],
    logger: Logger,
    rayjob_index: Any = None,
    raycluster_index: Any = None,
    created: bool = False,
) -> PassResult:
    """One pass over a TrainJob as `body` shows it; `cause` labels its metrics (what queued it).
    `created`: `body` is what the TrainJob's creation event brought (its first pass needs no
    fence, handlers/apply.py).

    Raises kopf.TemporaryError when the API server did not answer (the engine retries soon).
    """
    started = time.monotonic()
    result = "error"
    try:
        found = _pass(state, body, logger, rayjob_index, raycluster_index, created)
        result = found.plan.phase.lower() if found.plan.phase == machine.STALLED else "ok"
        return found
    except kopf.TemporaryError:
        result = "retry"
        raise
    except (*_TRANSPORT_ERRORS, k8s.ApiException) as exc:
        what = api_unavailable(exc)
        if what is None:
            raise
        result = "retry"
        raise kopf.TemporaryError(
            f"the API server did not answer ({what}); the pass is retried in "
            f"{API_RETRY_SECONDS:g} s",
            delay=API_RETRY_SECONDS,
        ) from exc
    finally:
        metrics.RECONCILES.labels(handler=cause, result=result).inc()
        metrics.RECONCILE_SECONDS.labels(handler=cause).observe(time.monotonic() - started)


def still_needs_operator(body: Mapping[str, Any], patch: kopf.Patch) -> bool:
    """Whether the job still needs the operator once this pass's patch is written: not
    finished, or finished with its TTL clean-up still to do."""
    after = {**(body.get("status") or {}), **dict(patch.get("status") or {})}
    metadata = body.get("metadata") or {}
    annotations = {
        **(metadata.get("annotations") or {}),
        **dict((patch.get("metadata") or {}).get("annotations") or {}),
    }
    return needs_operator(body.get("spec") or {}, after, annotations)


def api_unavailable(exc: BaseException) -> str | None:
    """What went wrong, when ``exc`` says the API server is away for now (restarting,
    overloaded, its connection cut); None for an error a retry in seconds would not fix."""
    if isinstance(exc, k8s.ApiException):
        if exc.status in TRANSIENT_STATUSES:
            return f"{exc.status} {exc.reason}".strip()
        return None
    if isinstance(exc, _TRANSPORT_ERRORS):
        return f"{type(exc).__name__}: {exc}"
    return None


def _pass(
    state: PassState,
    body: Mapping[str, Any],
    logger: Logger,
    rayjob_index: Any,
    raycluster_index: Any,
    from_creation: bool = False,
) -> PassResult:
    meta = Meta.from_metadata(body["metadata"])
    patch = kopf.Patch()
    status: dict[str, Any] = dict(body.get("status") or {})
    resolved = template_reader.resolve(meta.namespace, body.get("spec") or {}, status)
    snapshot = resolved.snapshot if resolved.write else status.get("template")
    trainjob, spec_problem, spec_problem_reason = parse_cached(state, body, snapshot, logger)
    if resolved.problem is not None:
        spec_problem, spec_problem_reason = resolved.problem, "TemplateUnavailable"
    now = machine.now_utc()

    rayjob = None
    problem = None
    older: dict[str, bool] = {}
    highest: int | None = None
    trouble = None
    attempt = 0
    resume_from: str | None = status.get("resumedFrom") or None
    pods: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    seen: list[dict[str, Any]] = []
    if not machine.is_terminal(status) and trainjob is not None and spec_problem is None:
        owned = owned_rayjobs(rayjob_index, meta)
        attempts = [a for r in owned if (a := machine.attempt_of(r)) is not None]
        highest = max(attempts, default=None)
        attempt = machine.current_attempt(status, highest)
        seen = owned
        for r in owned:
            at = machine.attempt_of(r)
            if at is not None and at < attempt:
                rmeta = r.get("metadata") or {}
                older[str(rmeta.get("name"))] = bool(rmeta.get("deletionTimestamp"))
        rayjob = lookup_rayjob(
            owned, meta.namespace, rayjob_name(meta.name, attempt), first_pass=not status
        )
        if rayjob is not None:
            rayjob = with_cluster_workers(rayjob, raycluster_index)
            trouble = cluster_problem(
                state, rayjob, raycluster_index, meta, attempt, now, trainjob=trainjob
            )
            if machine.attempt_failed(status, rayjob, attempt) or machine.deadline_passed(
                status, trainjob, now
            ):
                pods, events = attempt_evidence(state, rayjob, raycluster_index, meta, attempt)
        if machine.needs_preflight(status, rayjob) and not older:
            problem = preflight.check(trainjob, meta, state.config, resolved.own, resolved.template)
            if problem is None:
                resume_from, problem = preflight.resume_source(trainjob, meta, status)

    observation = machine.Observation(
        meta=meta,
        trainjob=trainjob,
        status=status,
        now=now,
        rayjob=rayjob,
        older_rayjobs=older,
        highest_attempt=highest,
        preflight_problem=problem,
        spec_problem=spec_problem,
        spec_problem_reason=spec_problem_reason,
        cluster_problem=trouble,
        attempt_pods=pods,
        attempt_events=events,
        checkpoint_grace_seconds=state.config.checkpoint_grace_seconds,
        resume_from=resume_from,
    )
    plan = machine.plan(observation)
    try:
        created = apply.run(
            state,
            plan.actions,
            trainjob,
            meta,
            patch,
            body["metadata"].get("creationTimestamp"),
            logger,
            fenced=not (from_creation and not status),
        )
    except apply.Fenced as exc:
        # This pass's picture is out of date: it writes nothing, the next pass decides again.
        metrics.FENCED_PASSES.inc()
        logger.info(f"Nothing created: {exc}.")
        fenced = PassResult(plan, kopf.Patch(), seen_rayjobs=list(seen), write=False)
        fenced.due(FENCED_RETRY_SECONDS, "fenced")
        return fenced
    except apply.Conflict as exc:
        plan = machine.plan(dataclasses.replace(observation, conflict=str(exc)))
        created = []
    except apply.Rejected as exc:
        plan = machine.plan(dataclasses.replace(observation, rejected=(exc.reason, exc.message)))
        created = []
    result = PassResult(plan, patch, seen_rayjobs=[*seen, *created])
    for key, value in plan.status.items():
        if status.get(key) != value:
            patch.status[key] = value
    if resolved.write:
        # The template as this pass used it; kept from the first attempt on (handlers/templates).
        patch.status["template"] = resolved.snapshot
    if plan.attempt_failure is not None:
        result.events.append(announce_failure(meta, attempt, plan.attempt_failure))
    for t in plan.transitions:
        if not t.announced:
            continue
        message = f"{t.type} is {t.status}" + (f": {t.message}" if t.message else "")
        result.events.append(Event(t.is_warning, t.reason, message))
    for message in plan.checkpoint_rejections:
        result.events.append(
            Event(True, machine.CHECKPOINT_REJECTED, message[: conditions.MAX_MESSAGE])
        )
    result.due(plan.recheck_after, "due")
    if trouble is None:
        # Nothing announces a pod the scheduler cannot place: a starting cluster's pods are
        # looked at when due, and again every resync interval while it starts and no problem
        # was found (a problem found is in the status; KubeRay's next change brings a pass).
        result.due(_unschedulable_look(rayjob, now, state.config.resync_seconds), "due")
    if plan.phase == machine.STALLED:
        stalled = conditions.find(plan.status["conditions"], conditions.STALLED) or {}
        logger.warning(f"Stalled ({stalled.get('reason')}): {stalled.get('message')}")
        # Fixing the cause (a Secret, a claim, a template) sends no event the operator watches.
        result.due(state.config.preflight_retry_seconds, "stalled")
    if result.due_in is not None and result.due_why == "due":
        logger.debug(f"Next deadline, grace period or TTL due in {result.due_in:.0f} s.")
    return result
