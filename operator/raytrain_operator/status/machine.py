"""The TrainJob state machine: what is observed in, what to do and what to report out.

Pure: the handlers gather an `Observation` (the TrainJob, the RayJob of the current attempt,
the result of the storage preflight, the clock) and carry out the returned `Plan` (actions on
children, a status patch, Events). Everything the operator decides lives here and is unit-tested
without a cluster.

Words from KubeRay are kept: a RayJob's `jobDeploymentStatus` (New, Initializing, Running,
Complete, Failed, Suspending, Suspended, Retrying, Waiting) and `jobStatus` (PENDING, RUNNING,
SUCCEEDED, FAILED, STOPPED). The runtime's `trainerStatus.phase` decides the training outcome;
the RayJob's status decides it only when the runtime died without reporting.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from raytrain_contract.api.v1alpha1 import DisruptionSpec, TrainJob
from raytrain_contract.meta import (
    ANNOTATION_CHECKPOINT_REQUESTED,
    ANNOTATION_GENERATION,
    ANNOTATION_SPEC_HASH,
    ANNOTATION_SUSPENDED_BY_USER,
    LABEL_ATTEMPT,
    Meta,
)
from raytrain_contract.pods import run_name
from raytrain_contract.timefmt import parse_rfc3339, rfc3339
from raytrain_operator.builders.names import rayjob_name
from raytrain_operator.builders.pods import DEFAULT_HEAD_RESOURCES
from raytrain_operator.builders.rayjob import (
    ANNOTATION_FIELD_HASHES,
    changed_fields,
    spec_hash,
)
from raytrain_operator.status import conditions as c
from raytrain_operator.status import goodput, triage
from raytrain_operator.status.conditions import Desired, Transition

#: Annotation on the TrainJob once its children were removed after the TTL.
ANNOTATION_CLEANED_UP = "raytrain.dev/children-deleted"
CHECKPOINT_GRACE_SECONDS = 120.0
#: A checkpoint request older than the grace period plus this is from an earlier suspend.
REQUEST_REUSE_MARGIN_SECONDS = 30.0
#: Spec fields the operator reads for its own decisions and applies to a running attempt at
#: once. The builders hash every field a RayJob is made from (their IMMEDIATE_FIELDS aside); a
#: field here may be in that hash but a change to it alone is never a pending spec change and
#: never starts a new attempt.
OPERATOR_FIELDS = frozenset({"spec.retryPolicy"})
#: Reconciling's reason while a spec change waits for the next attempt.
SPEC_CHANGE_PENDING = "SpecChangePending"

PENDING, RUNNING, SUSPENDED = "Pending", "Running", "Suspended"
SUCCEEDED, FAILED, STALLED = "Succeeded", "Failed", "Stalled"


def now_utc() -> datetime:
    return datetime.now(timezone.utc)


# ----------------------------------------------------------------------------------- actions


@dataclass(frozen=True)
class EnsureChildren:
    """Create (or find) the ConfigMap, RBAC and the RayJob of `attempt`."""

    attempt: int
    suspend: bool
    #: The checkpoint spec.resumeFrom resolved to (status.resumedFrom), for the contract.
    resume_from: str | None = None


@dataclass(frozen=True)
class SetRayJobSuspend:
    name: str
    suspend: bool
    by_user: bool


@dataclass(frozen=True)
class DeleteRayJob:
    name: str


@dataclass(frozen=True)
class DeleteChildren:
    """Every child of the TrainJob (all attempts' RayJobs, ConfigMap, RBAC): the TTL ran out."""


@dataclass(frozen=True)
class Annotate:
    """Set (or with value None remove) an annotation on the TrainJob itself."""

    key: str
    value: str | None


Action = EnsureChildren | SetRayJobSuspend | DeleteRayJob | DeleteChildren | Annotate


@dataclass(frozen=True)
class Observation:
    meta: Meta
    trainjob: TrainJob | None
    status: Mapping[str, Any]
    now: datetime
    #: The RayJob `<name>-<attempt>` of the current attempt, as read from the API (or None).
    rayjob: Mapping[str, Any] | None = None
    #: Owned RayJobs of earlier attempts that still exist: name -> True once being deleted.
    older_rayjobs: Mapping[str, bool] = field(default_factory=dict)
    #: The highest `raytrain.dev/attempt` among the owned RayJobs (None when there is none).
    highest_attempt: int | None = None
    #: Why the RayJob cannot be created yet (missing PVC, Secret...), or None.
    preflight_problem: tuple[str, str] | None = None
    #: Why the spec can never be built (invalid quantity...), or None.
    spec_problem: str | None = None
    #: The Stalled condition's reason for spec_problem.
    spec_problem_reason: str = "InvalidSpec"
    #: A child's name is taken by an object this TrainJob does not own (the message), or None.
    conflict: str | None = None
    #: The API server refused a child (reason, message with the API's own words), or None.
    rejected: tuple[str, str] | None = None
    #: Why the Ray cluster lacks pods (KubeRay's ReplicaFailure, Unschedulable pods), or None.
    cluster_problem: tuple[str, str] | None = None
    #: The Ray pods of the current attempt, read when it failed (`attempt_failed`), else ().
    attempt_pods: Sequence[Mapping[str, Any]] = ()
    #: Events about the attempt's children (a RayCluster's ReplicaFailure among them), or ().
    attempt_events: Sequence[Mapping[str, Any]] = ()
    checkpoint_grace_seconds: float = CHECKPOINT_GRACE_SECONDS
    #: The checkpoint spec.resumeFrom names (status.resumedFrom once recorded), or None.
    resume_from: str | None = None


@dataclass
class Plan:
    status: dict[str, Any] = field(default_factory=dict)
    actions: list[Action] = field(default_factory=list)
    transitions: list[Transition] = field(default_factory=list)
    #: Seconds after which something is due (a grace period, a deadline, the TTL), or None.
    #: The resync interval bounds how late it is acted on; handlers log it.
    recheck_after: float | None = None
    #: Why the current attempt failed, when this pass found it failed (one Event and one count
    #: of raytrain_attempt_failures_total each), else None.
    attempt_failure: triage.Triage | None = None

    @property
    def phase(self) -> str:
        return str(self.status.get("phase") or PENDING)


def is_terminal(status: Mapping[str, Any]) -> bool:
    conds = status.get("conditions")
    return c.is_true(conds, c.SUCCEEDED) or c.is_true(conds, c.FAILED)


def needs_operator(
    status: Mapping[str, Any], ttl_seconds: Any, annotations: Mapping[str, Any]
) -> bool:
    """Whether the operator still has work on a TrainJob: it has not finished, or it finished
    with a spec.ttlSecondsAfterFinished whose clean-up has not happened yet.

    Only such a job gets passes from the wake-up queue (the resync among them): a finished job
    without pending clean-up gets none.
    """
    if not is_terminal(status):
        return True
    return ttl_seconds is not None and ANNOTATION_CLEANED_UP not in annotations


def current_attempt(status: Mapping[str, Any], highest_attempt: int | None) -> int:
    """The attempt the job is at: the status' word, but never below a RayJob that exists.

    A status patch can be lost (a crash, a conflict) or read from an older snapshot; the RayJobs
    themselves, labelled with their attempt, cannot be: no pass ever goes back to an attempt
    lower than the highest one that was created.
    """
    try:
        attempt = int(status.get("attempt") or 0)
    except (TypeError, ValueError):
        attempt = 0
    return max(attempt, highest_attempt or 0)


def needs_preflight(obs_status: Mapping[str, Any], rayjob: Mapping[str, Any] | None) -> bool:
    """The storage preflight runs only before a RayJob is created."""
    return rayjob is None and not is_terminal(obs_status)


def _owned_by(rayjob: Mapping[str, Any], uid: str) -> bool:
    refs = (rayjob.get("metadata") or {}).get("ownerReferences") or []
    return any(r.get("uid") == uid for r in refs)


def _cluster_start(rj_status: Mapping[str, Any]) -> datetime | None:
    """When KubeRay started the RayJob's current cluster (reset on every resume)."""
    return parse_rfc3339(rj_status.get("startTime"))


def _report(
    status: Mapping[str, Any], attempt: int, cluster_start: datetime | None
) -> Mapping[str, Any]:
    """The runtime's report if it comes from this attempt's current cluster, else {}.

    A report names its attempt (from the pod's environment); one from another attempt does not
    count. Within an attempt, a report written before the current cluster started comes from
    an earlier cluster of the same RayJob (before a suspend or a Kueue preemption).
    """
    trainer = status.get("trainerStatus") or {}
    reported_attempt = trainer.get("attempt")
    if reported_attempt is not None and reported_attempt != attempt:
        return {}
    written = parse_rfc3339(trainer.get("lastUpdatedTime"))
    if cluster_start is not None and written is not None and written < cluster_start:
        return {}
    return trainer


def _trainer_phase(report: Mapping[str, Any]) -> tuple[str | None, str]:
    return report.get("phase"), str(report.get("message") or "")


class _Builder:
    """Accumulates the desired conditions and status of one pass."""

    def __init__(self, obs: Observation) -> None:
        self.obs = obs
        self.conds: dict[str, Desired] = {}
        self.status: dict[str, Any] = {}
        self.actions: list[Action] = []
        self.recheck: float | None = None
        #: A spec change the running attempt does not carry (the message), or None.
        self.pending: str | None = None
        self.failure: triage.Triage | None = None
        #: The attempt this pass found (before any advance), once the RayJob is known to be
        #: this job's: its cluster's time goes into status.goodput.
        self.accounted_attempt: int | None = None

    def set(self, type_: str, status: bool, reason: str, message: str = "") -> None:
        self.conds[type_] = Desired(status, reason, message)

    def due_in(self, seconds: float) -> None:
        seconds = max(seconds, 1.0)
        self.recheck = seconds if self.recheck is None else min(self.recheck, seconds)

    def finish(self, phase: str) -> Plan:
        obs = self.obs
        now = rfc3339(obs.now)
        generation = obs.meta.generation
        observed = generation
        if self.pending is not None:
            # The spec of this generation is not what runs: the generation is not observed.
            held = obs.status.get("observedGeneration")
            observed = held if isinstance(held, int) and held < generation else generation - 1
            other = self.conds.get(c.RECONCILING)
            message = self.pending
            if other is not None and other.status and other.message:
                message += f". Meanwhile: {other.message}"
            self.set(c.RECONCILING, True, SPEC_CHANGE_PENDING, message)
        merged, transitions = c.merge(obs.status.get("conditions"), self.conds, observed, now)
        if self.pending is not None:
            before = c.find(obs.status.get("conditions"), c.RECONCILING) or {}
            for cond in merged:
                if cond["type"] == c.RECONCILING:
                    # This one is about the current generation: it says what waits.
                    cond["observedGeneration"] = generation
            announced = any(t.type == c.RECONCILING for t in transitions)
            if not announced and before.get("observedGeneration") != generation:
                # A further edit while one is pending: say again what waits now.
                transitions.append(
                    Transition(c.RECONCILING, "True", SPEC_CHANGE_PENDING, self.pending)
                )
        self.status["conditions"] = merged
        self.status["phase"] = phase
        if self.accounted_attempt is not None:
            self._account(phase)
        if observed >= 1:
            self.status["observedGeneration"] = observed
        return Plan(self.status, self.actions, transitions, self.recheck, self.failure)

    def _account(self, phase: str) -> None:
        obs = self.obs
        seen = _seen(obs, self.accounted_attempt or 0)
        outcome: str | None = None
        if phase == SUCCEEDED:
            outcome = goodput.SUCCEEDED
        elif phase == FAILED:
            outcome = goodput.FAILED
        elif self.failure is not None:
            outcome = goodput.RETRIED
        elif phase == SUSPENDED or (seen is not None and not seen.up and seen.suspended):
            outcome = goodput.SUSPENDED
        elif self.status.get("attempt") != self.accounted_attempt:
            outcome = goodput.SUSPENDED  # a spec change while suspended moved to a new attempt
        active = phase not in (SUCCEEDED, FAILED)
        accounted = goodput.account(obs.status, seen, outcome, obs.now, active)
        if accounted or obs.status.get("goodput"):
            self.status["goodput"] = accounted or None


def _seen(obs: Observation, attempt: int) -> goodput.Seen | None:
    """The current attempt's cluster as this pass saw it, or None before KubeRay started it."""
    rj = obs.rayjob
    if rj is None:
        return None
    rj_status = rj.get("status") or {}
    start = _cluster_start(rj_status)
    if start is None:
        return None
    deployment = str(rj_status.get("jobDeploymentStatus") or "")
    suspended = bool((rj.get("spec") or {}).get("suspend"))
    ended = deployment in ("Complete", "Failed", "Suspending", "Suspended", "ValidationFailed")
    return goodput.Seen(
        attempt=attempt,
        start=start,
        end=parse_rfc3339(rj_status.get("endTime")),
        gpus=goodput.rayjob_gpus(rj),
        up=not suspended and not ended and not (rj.get("metadata") or {}).get("deletionTimestamp"),
        suspended=suspended or deployment in ("Suspending", "Suspended"),
        report=_report(obs.status, attempt, start),
        checkpoint=obs.status.get("checkpoint") or {},
    )


def plan(obs: Observation) -> Plan:
    """Decide one reconcile pass."""
    b = _Builder(obs)
    meta, st = obs.meta, obs.status
    attempt = current_attempt(st, obs.highest_attempt)
    restarts = int(st.get("restarts") or 0)
    b.status.update(
        {
            "runName": run_name(meta.name, meta.uid),
            "attempt": attempt,
            "restarts": restarts,
            "rayJobName": rayjob_name(meta.name, attempt),
        }
    )

    if is_terminal(st):
        return _terminal(b, attempt)

    tj = obs.trainjob
    if tj is None or obs.spec_problem:
        reason = obs.spec_problem_reason if obs.spec_problem else "InvalidSpec"
        b.set(c.STALLED, True, reason, obs.spec_problem or "the spec could not be parsed")
        b.set(c.CREATED, False, reason, "no RayJob is created until the spec is fixed")
        return b.finish(STALLED)

    spec = tj.spec
    rj = obs.rayjob
    name = rayjob_name(meta.name, attempt)

    conflict = obs.conflict
    if conflict is None and rj is not None and not _owned_by(rj, meta.uid):
        conflict = (
            f"a RayJob named {name} exists in namespace {meta.namespace} but does not belong "
            f"to this TrainJob (uid {meta.uid}); delete that RayJob or rename the TrainJob"
        )
    if conflict is not None:
        b.set(c.STALLED, True, "NameConflict", conflict)
        b.due_in(30)
        return b.finish(STALLED)
    b.accounted_attempt = attempt
    if obs.rejected is not None:
        reason, msg = obs.rejected
        b.set(c.STALLED, True, reason, msg)
        b.set(c.CREATED, False, reason, "the API server refused a child; see Stalled")
        b.due_in(30)
        return b.finish(STALLED)

    if not spec.suspend and ANNOTATION_CHECKPOINT_REQUESTED in meta.annotations:
        # A request belongs to one suspend: a later suspend must ask for a fresh checkpoint.
        b.actions.append(Annotate(ANNOTATION_CHECKPOINT_REQUESTED, None))

    # --- deadline, measured from the first start
    start = parse_rfc3339(st.get("startTime"))
    if spec.active_deadline_seconds and start is not None:
        elapsed = (obs.now - start).total_seconds()
        left = spec.active_deadline_seconds - elapsed
        if left <= 0:
            if rj is not None:
                b.actions.append(DeleteRayJob(name))
            b.actions += [
                DeleteRayJob(n) for n, gone in sorted(obs.older_rayjobs.items()) if not gone
            ]
            found = triage.classify_pods(
                obs.attempt_pods,
                obs.attempt_events,
                worker_memory(tj),
                head_memory=head_memory(tj),
            )
            why = f" While it ran, {found.reason}: {found.message}." if found else ""
            return _fail(
                b,
                "DeadlineExceeded",
                f"the job ran {int(elapsed)} s, more than spec.activeDeadlineSeconds "
                f"({spec.active_deadline_seconds}); its RayJob was deleted.{why} "
                f"{how_to_continue(meta.name, st)}, with a larger activeDeadlineSeconds",
            )
        b.due_in(left)

    # --- no RayJob yet for this attempt
    if rj is None:
        if obs.older_rayjobs:
            return _await_previous(b, name)
        if obs.preflight_problem is not None:
            reason, msg = obs.preflight_problem
            b.set(c.STALLED, True, reason, msg)
            b.set(c.CREATED, False, reason, "no RayJob is created until the problem is fixed")
            return b.finish(STALLED)
        suspend = spec.suspend or bool(spec.queue_name)
        b.actions.append(EnsureChildren(attempt, suspend, obs.resume_from))
        if obs.resume_from:
            b.status["resumedFrom"] = obs.resume_from
        b.set(c.CREATED, True, "RayJobCreated", f"created RayJob {name}")
        if spec.suspend:
            b.set(c.SUSPENDED, True, "Suspended", "spec.suspend is true; no Ray cluster runs")
            b.set(c.RUNNING, False, "Suspended", "")
            return b.finish(SUSPENDED)
        if spec.queue_name:
            return _queued(b, spec.queue_name)
        b.set(c.SUSPENDED, False, "NotSuspended", "")
        b.set(c.RUNNING, False, "Initializing", "")
        b.set(c.RECONCILING, True, "Initializing", f"waiting for KubeRay to start RayJob {name}")
        return b.finish(PENDING)

    b.set(c.CREATED, True, "RayJobCreated", f"RayJob {name} exists")
    rj_spec = rj.get("spec") or {}
    rj_meta = rj.get("metadata") or {}
    rj_annotations = rj_meta.get("annotations") or {}
    rj_status = rj.get("status") or {}
    if rj_meta.get("deletionTimestamp"):
        msg = f"RayJob {name} is being deleted; it is created again once it and its pods are gone"
        b.set(c.RUNNING, False, "RayJobDeleting", msg)
        b.set(c.RECONCILING, True, "RayJobDeleting", msg)
        b.due_in(2)
        return b.finish(PENDING)
    deployment = str(rj_status.get("jobDeploymentStatus") or "")
    job_status = str(rj_status.get("jobStatus") or "")
    rj_suspended = bool(rj_spec.get("suspend"))
    _observe_rayjob(b, rj_status, rj_suspended, st)

    if deployment == "ValidationFailed":
        detail = rj_status.get("message") or rj_status.get("reason") or "no message"
        return _fail(
            b,
            "RayJobValidationFailed",
            f"KubeRay refused RayJob {name}: {detail}. The same spec fails the same way on "
            "every retry, so none is made; fix the field KubeRay names and create the "
            "TrainJob again",
        )

    # --- outcome: the runtime's report first, the RayJob when the runtime said nothing
    report = _report(st, attempt, _cluster_start(rj_status))
    phase, message = _trainer_phase(report)
    if phase == SUCCEEDED or (phase is None and job_status == "SUCCEEDED"):
        source = "the trainer runtime" if phase == SUCCEEDED else f"RayJob {name}"
        return _succeed(b, message or f"training finished (reported by {source})")
    failure: tuple[str, str] | None = None
    if phase == FAILED:
        failure = ("TrainingFailed", message or "the trainer runtime reported a failure")
    elif deployment == "Failed" or job_status in ("FAILED", "STOPPED"):
        detail = rj_status.get("message") or rj_status.get("reason") or job_status or deployment
        failure = (
            "RayJobFailed",
            f"RayJob {name} ended with jobDeploymentStatus {deployment or '-'}, jobStatus "
            f"{job_status or '-'}: {detail}",
        )
    if failure is not None:
        evidence = triage.Evidence(
            rayjob_status=rj_status,
            pods=obs.attempt_pods,
            events=obs.attempt_events,
            report=report,
            worker_memory=worker_memory(tj),
            head_memory=head_memory(tj),
        )
        return _attempt_failed(b, tj, attempt, restarts, failure, triage.classify(evidence))

    # --- suspend and resume
    if spec.suspend:
        return _suspend(b, name, rj_suspended, deployment, job_status, phase, rj_status)
    if rj_suspended:
        by_user = rj_annotations.get(ANNOTATION_SUSPENDED_BY_USER) == "true"
        if _built_changes(tj, rj_annotations) != []:
            # The spec changed while no cluster ran: a new attempt carries it (same run name).
            msg = (
                f"the spec changed while RayJob {name} was suspended; attempt {attempt + 1} "
                "carries it and resumes from the latest checkpoint"
            )
            _advance(b, attempt, restarts)
            b.set(c.SUSPENDED, False, "Resumed", msg)
            b.set(c.RUNNING, False, "Resuming", msg)
            b.set(c.RECONCILING, True, "Resuming", msg)
            return b.finish(PENDING)
        if spec.queue_name and not by_user:
            return _queued(b, spec.queue_name)
        b.actions.append(SetRayJobSuspend(name, False, by_user=False))
        msg = f"resuming RayJob {name} from the latest checkpoint"
        b.set(c.SUSPENDED, False, "Resumed", msg)
        b.set(c.RUNNING, False, "Resuming", msg)
        b.set(c.RECONCILING, True, "Resuming", msg)
        return b.finish(PENDING)

    b.set(c.SUSPENDED, False, "NotSuspended", "")
    b.pending = _pending_change(obs, tj, rj_annotations, name, attempt)
    if deployment == "Running" and (phase == RUNNING or job_status == "RUNNING"):
        progress = report.get("progressPercentage")
        detail = f"jobStatus {job_status or 'PENDING'}"
        if progress is not None:
            detail += f", progress {progress}%"
        b.set(c.RUNNING, True, "RayJobRunning", f"RayJob {name} is Running ({detail})")
        return b.finish(RUNNING)
    if spec.pre_running_deadline_seconds:
        waited = _waiting_since(st, rj_meta)
        if waited is not None:
            elapsed = (obs.now - waited).total_seconds()
            left = spec.pre_running_deadline_seconds - elapsed
            if left <= 0:
                return _pre_running_deadline(b, tj, name, attempt, deployment, int(elapsed))
            b.due_in(left)
    if deployment == "Running":
        msg = (
            f"RayJob {name} submitted the Ray job; waiting for the trainer runtime of attempt "
            f"{attempt} to report from its cluster"
        )
        b.set(c.RUNNING, False, "Starting", msg)
        b.set(c.RECONCILING, True, "Starting", msg)
        return b.finish(PENDING)
    reason = {
        "": "Initializing",
        "New": "Initializing",
        "Initializing": "ClusterStarting",
        "Waiting": "Waiting",
        "Retrying": "Retrying",
        "Suspending": "Resuming",
        "Suspended": "Resuming",
    }.get(deployment, "Initializing")
    b.set(c.RUNNING, False, reason, "")
    message = _cluster_state(b, name, deployment, "is")
    if obs.cluster_problem is not None:
        reason, problem = obs.cluster_problem
        message = f"{message}. {problem}"
    b.set(c.RECONCILING, True, reason, message)
    return b.finish(PENDING)


def _cluster_state(b: _Builder, name: str, deployment: str, verb: str) -> str:
    """'RayJob NAME is|was DEPLOYMENT; workers ready R/D' from this pass's status.workers."""
    workers = b.status.get("workers") or {}
    return (
        f"RayJob {name} {verb} {deployment or 'New'}; workers ready "
        f"{workers.get('ready', 0)}/{workers.get('desired', '?')}"
    )


def _waiting_since(status: Mapping[str, Any], rj_meta: Mapping[str, Any]) -> datetime | None:
    """Since when the current attempt's cluster has been asked for: its RayJob's creation, or
    the latest resume (Suspended turning False) when that came later."""
    created = parse_rfc3339(rj_meta.get("creationTimestamp"))
    suspended = c.find(status.get("conditions"), c.SUSPENDED)
    resumed = None
    if suspended is not None and suspended.get("status") == "False":
        resumed = parse_rfc3339(suspended.get("lastTransitionTime"))
    found = [t for t in (created, resumed) if t is not None]
    return max(found) if found else None


def _pre_running_deadline(
    b: _Builder, tj: TrainJob, name: str, attempt: int, deployment: str, elapsed: int
) -> Plan:
    """The attempt's cluster did not start training in time: delete it (its pods hold or wait
    for GPUs) and fail the job, saying what it was waiting for."""
    b.actions.append(DeleteRayJob(name))
    waiting = _cluster_state(b, name, deployment, "was")
    if b.obs.cluster_problem is not None:
        waiting += f"; {b.obs.cluster_problem[1]}"
    return _fail(
        b,
        "PreRunningDeadlineExceeded",
        f"attempt {attempt} waited {elapsed} s for its Ray cluster to start training, more than "
        f"spec.preRunningDeadlineSeconds ({tj.spec.pre_running_deadline_seconds}): {waiting}. "
        "Its RayJob was deleted. Free or add the resources it waits for, or raise "
        "preRunningDeadlineSeconds",
    )


def _pending_change(
    obs: Observation, tj: TrainJob, rj_annotations: Mapping[str, Any], name: str, attempt: int
) -> str | None:
    """What of the spec the running attempt does not carry, or None when it carries it all."""
    generation = obs.meta.generation
    built = rj_annotations.get(ANNOTATION_GENERATION)
    if built == str(generation):
        return None
    fields = _built_changes(tj, rj_annotations)
    if fields == []:
        return None
    what = ", ".join(fields) if fields else "the spec"
    return (
        f"generation {generation} changed {what}; RayJob {name} (attempt {attempt}) still runs "
        f"the spec of generation {built or 'before'}. These fields are built into an attempt, "
        "so they take effect when the next one starts: after a failed attempt, or at once from "
        "the latest checkpoint if you set spec.suspend to true and then back to false"
    )


def _built_changes(tj: TrainJob, rj_annotations: Mapping[str, Any]) -> list[str] | None:
    """The spec fields the RayJob was built with that differ now: [] when none does, None when
    something differs but the RayJob does not say what.

    The per-field hashes decide when the RayJob carries them, so that a field only the operator
    reads (OPERATOR_FIELDS) never counts; the whole-spec hash is the fallback for a RayJob
    without them.
    """
    fields = changed_fields(tj, rj_annotations.get(ANNOTATION_FIELD_HASHES))
    if fields is not None:
        return [f for f in fields if f not in OPERATOR_FIELDS]
    if rj_annotations.get(ANNOTATION_SPEC_HASH) in (None, spec_hash(tj)):
        return []
    return None


def _await_previous(b: _Builder, name: str) -> Plan:
    """Attempts never overlap: the next RayJob waits until the earlier ones and their pods are
    gone (they are deleted in the foreground, so a RayJob disappears after its pods)."""
    older = b.obs.older_rayjobs
    b.actions += [DeleteRayJob(n) for n, deleting in sorted(older.items()) if not deleting]
    msg = (
        f"waiting for RayJob {', '.join(sorted(older))} of an earlier attempt and its pods to be "
        f"deleted before RayJob {name} starts (two attempts never run at once)"
    )
    b.set(c.RUNNING, False, "StoppingPreviousAttempt", msg)
    b.set(c.RECONCILING, True, "StoppingPreviousAttempt", msg)
    b.due_in(2)
    return b.finish(PENDING)


def _advance(b: _Builder, attempt: int, restarts: int) -> None:
    """Move to the next attempt in the status only; the next passes remove the old RayJob and,
    once it is gone, create the new one. Nothing is deleted before the new attempt number is
    on the API server, so a lost status patch is decided again, never half-done."""
    nxt = attempt + 1
    b.status.update(
        {"attempt": nxt, "restarts": restarts, "rayJobName": rayjob_name(b.obs.meta.name, nxt)}
    )
    for key in ("rayClusterName", "dashboardURL", "workers"):
        b.status[key] = None


def _observe_rayjob(
    b: _Builder, rj_status: Mapping[str, Any], rj_suspended: bool, st: Mapping[str, Any]
) -> None:
    """Copy names, workers and the first start from the RayJob's status."""
    if rj_status.get("rayClusterName"):
        b.status["rayClusterName"] = rj_status["rayClusterName"]
    if rj_status.get("dashboardURL"):
        b.status["dashboardURL"] = rj_status["dashboardURL"]
    cluster = rj_status.get("rayClusterStatus") or {}
    if cluster:
        b.status["workers"] = {
            "desired": int(cluster.get("desiredWorkerReplicas") or 0),
            "ready": int(cluster.get("readyWorkerReplicas") or 0),
        }
    deployment = rj_status.get("jobDeploymentStatus")
    if not st.get("startTime") and not rj_suspended and deployment in ("Initializing", "Running"):
        started = parse_rfc3339(rj_status.get("startTime")) or b.obs.now
        b.status["startTime"] = rfc3339(started)


def _queued(b: _Builder, queue: str) -> Plan:
    msg = f"waiting for Kueue to admit the RayJob from LocalQueue {queue}"
    b.set(c.SUSPENDED, True, "Queued", msg)
    b.set(c.RUNNING, False, "Queued", msg)
    b.set(c.RECONCILING, True, "Queued", msg)
    return b.finish(PENDING)


def _suspend(
    b: _Builder,
    name: str,
    rj_suspended: bool,
    deployment: str,
    job_status: str,
    phase: str | None,
    rj_status: Mapping[str, Any],
) -> Plan:
    obs = b.obs
    if rj_suspended:
        b.set(c.SUSPENDED, True, "Suspended", f"RayJob {name} is suspended; no Ray cluster runs")
        b.set(c.RUNNING, False, "Suspended", "")
        return b.finish(SUSPENDED)
    # The runtime can only checkpoint if it runs: the Ray job started and reports as Running.
    runtime_up = deployment == "Running" and (job_status == "RUNNING" or phase == RUNNING)
    requested = parse_rfc3339(obs.meta.annotations.get(ANNOTATION_CHECKPOINT_REQUESTED))
    if requested is not None and _stale_request(obs, requested, rj_status):
        requested = None
    if requested is None:
        # The request always precedes the suspend (the contract); it is waited on only when
        # a runtime is there to answer it. A request is never reused from an earlier suspend.
        b.actions.append(Annotate(ANNOTATION_CHECKPOINT_REQUESTED, rfc3339(obs.now)))
        if runtime_up:
            return _checkpointing(b, obs.checkpoint_grace_seconds)
    elif runtime_up:
        trainer = _report(
            obs.status, current_attempt(obs.status, obs.highest_attempt), _cluster_start(rj_status)
        )
        written = parse_rfc3339(trainer.get("lastUpdatedTime"))
        done = (
            trainer.get("checkpointing") is False and written is not None and written >= requested
        )
        waited = (obs.now - requested).total_seconds()
        if not done and waited < obs.checkpoint_grace_seconds:
            return _checkpointing(b, obs.checkpoint_grace_seconds - waited)
    b.actions.append(SetRayJobSuspend(name, True, by_user=True))
    b.set(c.SUSPENDED, True, "Suspended", f"suspending RayJob {name}; its Ray cluster is removed")
    b.set(c.RUNNING, False, "Suspended", "")
    return b.finish(SUSPENDED)


def _stale_request(obs: Observation, requested: datetime, rj_status: Mapping[str, Any]) -> bool:
    """A checkpoint request left from an earlier suspend: older than the running cluster, or
    older than one grace period and a resync (this suspend would have gone ahead by then)."""
    started = _cluster_start(rj_status)
    if started is not None and requested < started:
        return True
    age = (obs.now - requested).total_seconds()
    return age > obs.checkpoint_grace_seconds + REQUEST_REUSE_MARGIN_SECONDS


def _checkpointing(b: _Builder, left: float) -> Plan:
    msg = (
        "spec.suspend is true: waiting for the runtime to save a checkpoint "
        f"(at most {int(left)} s more) before the Ray cluster is removed"
    )
    b.set(c.RECONCILING, True, "Checkpointing", msg)
    b.due_in(left)
    return b.finish(RUNNING)


def attempt_failed(
    status: Mapping[str, Any], rayjob: Mapping[str, Any] | None, attempt: int
) -> bool:
    """Whether this attempt's outcome is a failure `plan` hands to `_attempt_failed` (the
    handlers then read the attempt's pods for the classification)."""
    if rayjob is None or is_terminal(status):
        return False
    rj_status = rayjob.get("status") or {}
    deployment = str(rj_status.get("jobDeploymentStatus") or "")
    job_status = str(rj_status.get("jobStatus") or "")
    if deployment == "ValidationFailed":
        return False
    phase, _ = _trainer_phase(_report(status, attempt, _cluster_start(rj_status)))
    if phase == SUCCEEDED or (phase is None and job_status == "SUCCEEDED"):
        return False
    return phase == FAILED or deployment == "Failed" or job_status in ("FAILED", "STOPPED")


def deadline_passed(status: Mapping[str, Any], tj: TrainJob | None, now: datetime) -> bool:
    """Whether `plan` ends the job for spec.activeDeadlineSeconds in this pass (the handlers
    then read the attempt's pods: what kept it from running goes into the message)."""
    if tj is None or not tj.spec.active_deadline_seconds or is_terminal(status):
        return False
    start = parse_rfc3339(status.get("startTime"))
    return start is not None and (now - start).total_seconds() >= tj.spec.active_deadline_seconds


def worker_memory(tj: TrainJob) -> str | None:
    """spec.scaling.resourcesPerWorker.memory as written, for the OOM advice."""
    resources = tj.spec.scaling.resources_per_worker
    memory = resources.memory if resources is not None else None
    return str(memory) if memory is not None else None


def head_memory(tj: TrainJob) -> str | None:
    """The head's memory limit as the builders give it: spec.head.resources replace the
    default whole (builders/pods.py), so a resources without a memory limit leaves none."""
    head = tj.spec.head
    if head is None or not head.resources:
        return f"{DEFAULT_HEAD_RESOURCES['limits']['memory']}, the default"
    memory = (head.resources.get("limits") or {}).get("memory")
    return str(memory) if memory is not None else None


def retry_policy(tj: TrainJob) -> triage.RetryPolicy:
    """The default retry policy with the job's spec.retryPolicy merged over it."""
    spec = tj.spec.retry_policy
    if spec is None:
        return triage.DEFAULT_POLICY
    codes = {rule.code: rule.retry for rule in spec.exit_codes or []}
    return triage.merge_policy(spec.classes, codes)


def _attempt_failed(
    b: _Builder,
    tj: TrainJob,
    attempt: int,
    restarts: int,
    failure: tuple[str, str],
    found: triage.Triage,
) -> Plan:
    """An attempt failed: its class decides the reason and whether to retry at all (the default
    policy: a user exception or an OOMKilled container fails at once, spending no retry)."""
    found = _head_node_lost(b.obs.status, attempt, found)
    b.failure = found
    said = failure[1]
    what = found.message
    if found.failure_class is triage.FailureClass.UNKNOWN:
        what = f"{said}; {triage.UNKNOWN_HINT}"
    elif found.pod is not None and said:
        # The class came from the pods: keep what the runtime or KubeRay said beside it.
        what += f" (then: {said})"
    policy = retry_policy(tj)
    preempted = preemption(found, b.obs.attempt_pods) or head_disrupted(b.obs.status, attempt)
    # spec.retryPolicy.classes.NodeLost: false turns preemption retries off as well.
    if preempted is not None and triage.retry_decision(triage.FailureClass.NODE_LOST, None, policy):
        budget = max_preemptions(tj)
        used = int(b.obs.status.get("preemptions") or 0)
        if used < budget:
            return _preempted(b, attempt, restarts, used, budget, preempted)
        what += f" (spec.disruption.maxPreemptions {budget} spent: this one counts as a failure)"
    limit = tj.spec.backoff_limit
    retry = triage.retry_decision(
        found.failure_class, found.exit_code, policy, permanent=found.permanent
    )
    if not retry:
        advice = triage.advice(found, retried=False, policy=policy)
        if limit > 0 and restarts < limit:
            advice += f" ({limit - restarts} of spec.backoffLimit {limit} retries left unused.)"
        return _fail(b, found.reason, f"attempt {attempt} failed ({found.reason}): {what}.{advice}")
    if restarts < limit:
        _advance(b, attempt, restarts + 1)
        nxt = rayjob_name(b.obs.meta.name, attempt + 1)
        msg = (
            f"attempt {attempt} failed ({found.reason}: {what}); retry {restarts + 1} of "
            f"{limit}: once RayJob {rayjob_name(b.obs.meta.name, attempt)} and its pods are "
            f"gone, RayJob {nxt} starts from the latest checkpoint"
        )
        b.set(c.RUNNING, False, "Retrying", msg)
        b.set(c.RECONCILING, True, "Retrying", msg)
        return b.finish(PENDING)
    if limit > 0:
        return _fail(
            b,
            "BackoffLimitExceeded",
            f"attempt {attempt} failed ({found.reason}: {what}) and spec.backoffLimit ({limit}) "
            "retries are used up",
        )
    return _fail(b, found.reason, f"attempt {attempt} failed ({found.reason}): {what}")


#: Reasons of a pod's DisruptionTarget condition (set by whoever takes a pod away) that are
#: not in triage's NodeLost: an Eviction API call (a drain) and a scheduler's preemption.
PREEMPTION_DISRUPTIONS = ("EvictionByEvictionAPI", "PreemptionByScheduler", "PreemptionByKueue")


def max_preemptions(tj: TrainJob) -> int:
    """spec.disruption.maxPreemptions, or its default."""
    return (tj.spec.disruption or DisruptionSpec()).max_preemptions


def preemption(found: triage.Triage, pods: Sequence[Mapping[str, Any]]) -> str | None:
    """What took the attempt's pod away when Kubernetes did (triage's NodeLost, or a pod's
    DisruptionTarget condition of an eviction or a preemption), in words; None otherwise."""
    if found.failure_class is triage.FailureClass.NODE_LOST:
        return found.message
    for pod in pods:
        for cond in (pod.get("status") or {}).get("conditions") or []:
            if (
                cond.get("type") == "DisruptionTarget"
                and cond.get("status") == "True"
                and cond.get("reason") in PREEMPTION_DISRUPTIONS
            ):
                name = (pod.get("metadata") or {}).get("name") or "?"
                return (
                    f"pod {name} was taken away ({cond.get('reason')}: "
                    f"{cond.get('message') or 'no message'})"
                )
    return None


def _head_node_lost(status: Mapping[str, Any], attempt: int, found: triage.Triage) -> triage.Triage:
    """NodeLost when the head's preStop hook saw the node take this attempt's head away.

    Such a head is gone before the attempt fails, and what the pods left, the runtime and
    KubeRay say then (a lost driver, a peer gone from a collective) only follows from it. A
    class the attempt's own pods showed (an OOM kill, an image pull) is kept.
    """
    seen = _disrupted(status, attempt)
    if (
        seen is None
        or seen["reason"] not in triage.NODE_DISRUPTIONS
        or found.pod is not None
        or found.failure_class
        not in (triage.FailureClass.UNKNOWN, triage.FailureClass.COLLECTIVE_TIMEOUT)
    ):
        return found
    return triage.node_deleted(
        seen.get("pod") or "?", seen["reason"], seen.get("message"), what="head pod"
    )


def _disrupted(status: Mapping[str, Any], attempt: int) -> Mapping[str, Any] | None:
    """status.disrupted when the head's preStop hook wrote it for this attempt, with a reason."""
    seen = status.get("disrupted") or {}
    return seen if seen.get("attempt") == attempt and seen.get("reason") else None


def head_disrupted(status: Mapping[str, Any], attempt: int) -> str | None:
    """status.disrupted of this attempt (the head's preStop hook wrote it), in words."""
    seen = _disrupted(status, attempt)
    if seen is None:
        return None
    return (
        f"head pod {seen.get('pod') or '?'} was taken away ({seen.get('reason')}: "
        f"{seen.get('message') or 'no message'})"
    )


def _preempted(b: _Builder, attempt: int, restarts: int, used: int, budget: int, what: str) -> Plan:
    """A preempted attempt: the next one resumes from the latest checkpoint, spending a
    preemption of spec.disruption.maxPreemptions and no retry of spec.backoffLimit."""
    _advance(b, attempt, restarts)
    b.status["preemptions"] = used + 1
    nxt = rayjob_name(b.obs.meta.name, attempt + 1)
    msg = (
        f"attempt {attempt} was preempted ({what}); preemption {used + 1} of "
        f"spec.disruption.maxPreemptions {budget}, no spec.backoffLimit retry spent: once "
        f"RayJob {rayjob_name(b.obs.meta.name, attempt)} and its pods are gone, RayJob {nxt} "
        "starts from the latest checkpoint"
    )
    b.set(c.RUNNING, False, "Preempted", msg)
    b.set(c.RECONCILING, True, "Preempted", msg)
    return b.finish(PENDING)


def how_to_continue(name: str, status: Mapping[str, Any]) -> str:
    """How a new TrainJob continues the run of a failed one (spec.resumeFrom); no period."""
    latest = (status.get("checkpoint") or {}).get("latestURI")
    if latest:
        return (
            "To continue from its latest checkpoint, create a TrainJob with "
            f"spec.resumeFrom.trainJob: {name} (while this one exists) or "
            f"spec.resumeFrom.checkpoint: {latest}"
        )
    started = status.get("resumedFrom")
    if started:
        return (
            "Its run saved no checkpoint of its own: a TrainJob with "
            f"spec.resumeFrom.checkpoint: {started} starts where this one did"
        )
    return "Its run saved no checkpoint: a new TrainJob starts from the beginning"


def _fail(b: _Builder, reason: str, message: str) -> Plan:
    if "spec.resumeFrom" not in message and (b.obs.status.get("checkpoint") or {}).get("latestURI"):
        message = f"{message.rstrip('.')}. {how_to_continue(b.obs.meta.name, b.obs.status)}"
    b.set(c.FAILED, True, reason, message)
    b.set(c.SUCCEEDED, False, reason, "")
    b.set(c.RUNNING, False, reason, "")
    return _finished(b, FAILED)


def _succeed(b: _Builder, message: str) -> Plan:
    b.set(c.SUCCEEDED, True, "TrainingSucceeded", message)
    b.set(c.FAILED, False, "TrainingSucceeded", "")
    b.set(c.RUNNING, False, "TrainingSucceeded", "")
    return _finished(b, SUCCEEDED)


def _finished(b: _Builder, phase: str) -> Plan:
    b.status["completionTime"] = rfc3339(b.obs.now)
    b.set(c.SUSPENDED, False, "Finished", "")
    tj = b.obs.trainjob
    if tj is not None and tj.spec.ttl_seconds_after_finished is not None:
        b.due_in(float(tj.spec.ttl_seconds_after_finished))
    return b.finish(phase)


def _terminal(b: _Builder, attempt: int) -> Plan:
    """A finished job is never re-run: only the TTL clean-up remains."""
    obs = b.obs
    st = obs.status
    phase = SUCCEEDED if c.is_true(st.get("conditions"), c.SUCCEEDED) else FAILED
    tj = obs.trainjob
    ttl = tj.spec.ttl_seconds_after_finished if tj is not None else None
    finished = parse_rfc3339(st.get("completionTime"))
    if (
        ttl is not None
        and finished is not None
        and ANNOTATION_CLEANED_UP not in obs.meta.annotations
    ):
        left = (finished + timedelta(seconds=ttl) - obs.now).total_seconds()
        if left <= 0:
            b.actions.append(DeleteChildren())
            b.actions.append(Annotate(ANNOTATION_CLEANED_UP, rfc3339(obs.now)))
        else:
            b.due_in(left)
    return b.finish(phase)


def attempt_of(rayjob: Mapping[str, Any]) -> int | None:
    labels = (rayjob.get("metadata") or {}).get("labels") or {}
    value = labels.get(LABEL_ATTEMPT)
    return int(value) if value is not None and str(value).isdigit() else None
