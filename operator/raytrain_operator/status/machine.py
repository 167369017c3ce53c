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

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from raytrain_contract.timefmt import parse_rfc3339, rfc3339
from raytrain_operator.api.v1alpha1 import TrainJob
from raytrain_operator.builders.meta import (
    ANNOTATION_CHECKPOINT_REQUESTED,
    ANNOTATION_SPEC_HASH,
    ANNOTATION_SUSPENDED_BY_USER,
    LABEL_ATTEMPT,
    Meta,
)
from raytrain_operator.builders.names import rayjob_name, run_name
from raytrain_operator.builders.rayjob import spec_hash
from raytrain_operator.status import conditions as c
from raytrain_operator.status.conditions import Desired, Transition

#: Annotation on the TrainJob once its children were removed after the TTL.
ANNOTATION_CLEANED_UP = "raytrain.dev/children-deleted"
CHECKPOINT_GRACE_SECONDS = 120.0

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
    #: Why the RayJob cannot be created yet (missing PVC, Secret...), or None.
    preflight_problem: tuple[str, str] | None = None
    #: Why the spec can never be built (invalid quantity...), or None.
    spec_problem: str | None = None
    #: A child's name is taken by an object this TrainJob does not own (the message), or None.
    conflict: str | None = None
    checkpoint_grace_seconds: float = CHECKPOINT_GRACE_SECONDS


@dataclass
class Plan:
    status: dict[str, Any] = field(default_factory=dict)
    actions: list[Action] = field(default_factory=list)
    transitions: list[Transition] = field(default_factory=list)
    #: Seconds after which something is due (a grace period, a deadline, the TTL), or None.
    #: The resync timer bounds how late it is acted on; handlers log it.
    recheck_after: float | None = None

    @property
    def phase(self) -> str:
        return str(self.status.get("phase") or PENDING)


def is_terminal(status: Mapping[str, Any]) -> bool:
    conds = status.get("conditions")
    return c.is_true(conds, c.SUCCEEDED) or c.is_true(conds, c.FAILED)


def needs_preflight(obs_status: Mapping[str, Any], rayjob: Mapping[str, Any] | None) -> bool:
    """The storage preflight runs only before a RayJob is created."""
    return rayjob is None and not is_terminal(obs_status)


def _owned_by(rayjob: Mapping[str, Any], uid: str) -> bool:
    refs = (rayjob.get("metadata") or {}).get("ownerReferences") or []
    return any(r.get("uid") == uid for r in refs)


def _trainer_phase(status: Mapping[str, Any], attempt: int) -> tuple[str | None, str]:
    """The runtime's phase for this attempt (a report from an earlier attempt does not count)."""
    trainer = status.get("trainerStatus") or {}
    reported_attempt = trainer.get("attempt")
    if reported_attempt is not None and reported_attempt != attempt:
        return None, ""
    return trainer.get("phase"), str(trainer.get("message") or "")


class _Builder:
    """Accumulates the desired conditions and status of one pass."""

    def __init__(self, obs: Observation) -> None:
        self.obs = obs
        self.conds: dict[str, Desired] = {}
        self.status: dict[str, Any] = {}
        self.actions: list[Action] = []
        self.recheck: float | None = None

    def set(self, type_: str, status: bool, reason: str, message: str = "") -> None:
        self.conds[type_] = Desired(status, reason, message)

    def due_in(self, seconds: float) -> None:
        seconds = max(seconds, 1.0)
        self.recheck = seconds if self.recheck is None else min(self.recheck, seconds)

    def finish(self, phase: str) -> Plan:
        obs = self.obs
        now = rfc3339(obs.now)
        merged, transitions = c.merge(
            obs.status.get("conditions"), self.conds, obs.meta.generation, now
        )
        self.status["conditions"] = merged
        self.status["phase"] = phase
        self.status["observedGeneration"] = obs.meta.generation
        return Plan(self.status, self.actions, transitions, self.recheck)


def plan(obs: Observation) -> Plan:
    """Decide one reconcile pass."""
    b = _Builder(obs)
    meta, st = obs.meta, obs.status
    attempt = int(st.get("attempt") or 0)
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
        b.set(c.STALLED, True, "InvalidSpec", obs.spec_problem or "the spec could not be parsed")
        b.set(c.CREATED, False, "InvalidSpec", "no RayJob is created until the spec is fixed")
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

    # --- deadline, measured from the first start
    start = parse_rfc3339(st.get("startTime"))
    if spec.active_deadline_seconds and start is not None:
        elapsed = (obs.now - start).total_seconds()
        left = spec.active_deadline_seconds - elapsed
        if left <= 0:
            if rj is not None:
                b.actions.append(DeleteRayJob(name))
            return _fail(
                b,
                "DeadlineExceeded",
                f"the job ran {int(elapsed)} s, more than spec.activeDeadlineSeconds "
                f"({spec.active_deadline_seconds}); its RayJob was deleted. Raise "
                "activeDeadlineSeconds and create the job again to continue from the latest "
                "checkpoint",
            )
        b.due_in(left)

    # --- no RayJob yet for this attempt
    if rj is None:
        if obs.preflight_problem is not None:
            reason, msg = obs.preflight_problem
            b.set(c.STALLED, True, reason, msg)
            b.set(c.CREATED, False, reason, "no RayJob is created until the problem is fixed")
            return b.finish(STALLED)
        suspend = spec.suspend or bool(spec.queue_name)
        b.actions.append(EnsureChildren(attempt, suspend))
        b.set(c.CREATED, True, "RayJobCreated", f"created RayJob {name}")
        if spec.suspend:
            b.set(c.SUSPENDED, True, "Suspended", "spec.suspend is true; no Ray cluster runs")
            b.set(c.RUNNING, False, "Suspended", "")
            return b.finish(SUSPENDED)
        if spec.queue_name:
            return _queued(b, spec.queue_name)
        b.set(c.SUSPENDED, False, "NotSuspended", "")
        b.set(c.RECONCILING, True, "Initializing", f"waiting for KubeRay to start RayJob {name}")
        return b.finish(PENDING)

    b.set(c.CREATED, True, "RayJobCreated", f"RayJob {name} exists")
    rj_spec = rj.get("spec") or {}
    rj_meta = rj.get("metadata") or {}
    rj_annotations = rj_meta.get("annotations") or {}
    rj_status = rj.get("status") or {}
    deployment = str(rj_status.get("jobDeploymentStatus") or "")
    job_status = str(rj_status.get("jobStatus") or "")
    rj_suspended = bool(rj_spec.get("suspend"))
    _observe_rayjob(b, rj_status, rj_suspended, st)

    # --- outcome: the runtime's report first, the RayJob when the runtime said nothing
    phase, message = _trainer_phase(st, attempt)
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
        return _attempt_failed(b, tj, attempt, restarts, name, failure)

    # --- suspend and resume
    if spec.suspend:
        return _suspend(b, tj, name, rj_suspended, deployment, job_status, phase)
    if rj_suspended:
        by_user = rj_annotations.get(ANNOTATION_SUSPENDED_BY_USER) == "true"
        if spec.queue_name and not by_user:
            return _queued(b, spec.queue_name)
        if ANNOTATION_CHECKPOINT_REQUESTED in meta.annotations:
            b.actions.append(Annotate(ANNOTATION_CHECKPOINT_REQUESTED, None))
        if rj_annotations.get(ANNOTATION_SPEC_HASH) not in (None, spec_hash(tj)):
            # The spec changed while suspended: a new RayJob carries it (same run name).
            b.actions.append(DeleteRayJob(name))
            b.actions.append(EnsureChildren(attempt + 1, bool(spec.queue_name)))
            b.status["attempt"] = attempt + 1
            b.status["rayJobName"] = rayjob_name(meta.name, attempt + 1)
            b.set(c.CREATED, True, "RayJobCreated", f"spec changed: created attempt {attempt + 1}")
            msg = "resuming with the changed spec from the latest checkpoint"
        else:
            b.actions.append(SetRayJobSuspend(name, False, by_user=False))
            msg = f"resuming RayJob {name} from the latest checkpoint"
        b.set(c.SUSPENDED, False, "Resumed", msg)
        b.set(c.RUNNING, False, "Resuming", msg)
        b.set(c.RECONCILING, True, "Resuming", msg)
        return b.finish(PENDING)

    b.set(c.SUSPENDED, False, "NotSuspended", "")
    if deployment == "Running" or phase == RUNNING:
        progress = (st.get("trainerStatus") or {}).get("progressPercentage")
        detail = f"jobStatus {job_status or 'PENDING'}"
        if progress is not None:
            detail += f", progress {progress}%"
        b.set(c.RUNNING, True, "RayJobRunning", f"RayJob {name} is Running ({detail})")
        return b.finish(RUNNING)
    reason = {
        "": "Initializing",
        "New": "Initializing",
        "Initializing": "ClusterStarting",
        "Waiting": "Waiting",
        "Retrying": "Retrying",
        "Suspending": "Resuming",
        "Suspended": "Resuming",
    }.get(deployment, "Initializing")
    workers = b.status.get("workers") or {}
    b.set(c.RUNNING, False, reason, "")
    b.set(
        c.RECONCILING,
        True,
        reason,
        f"RayJob {name} is {deployment or 'New'}; workers ready "
        f"{workers.get('ready', 0)}/{workers.get('desired', '?')}",
    )
    return b.finish(PENDING)


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
    tj: TrainJob,
    name: str,
    rj_suspended: bool,
    deployment: str,
    job_status: str,
    phase: str | None,
) -> Plan:
    obs = b.obs
    if rj_suspended:
        b.set(c.SUSPENDED, True, "Suspended", f"RayJob {name} is suspended; no Ray cluster runs")
        b.set(c.RUNNING, False, "Suspended", "")
        return b.finish(SUSPENDED)
    # The runtime can only checkpoint if it runs: the Ray job started and reports as Running.
    runtime_up = deployment == "Running" and (job_status == "RUNNING" or phase == RUNNING)
    requested = parse_rfc3339(obs.meta.annotations.get(ANNOTATION_CHECKPOINT_REQUESTED))
    if requested is None:
        # The request always precedes the suspend (the contract); it is waited on only when
        # a runtime is there to answer it.
        b.actions.append(Annotate(ANNOTATION_CHECKPOINT_REQUESTED, rfc3339(obs.now)))
        if runtime_up:
            return _checkpointing(b, obs.checkpoint_grace_seconds)
    elif runtime_up:
        trainer = obs.status.get("trainerStatus") or {}
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


def _checkpointing(b: _Builder, left: float) -> Plan:
    msg = (
        "spec.suspend is true: waiting for the runtime to save a checkpoint "
        f"(at most {int(left)} s more) before the Ray cluster is removed"
    )
    b.set(c.RECONCILING, True, "Checkpointing", msg)
    b.due_in(left)
    return b.finish(RUNNING)


def _attempt_failed(
    b: _Builder, tj: TrainJob, attempt: int, restarts: int, name: str, failure: tuple[str, str]
) -> Plan:
    reason, message = failure
    limit = tj.spec.backoff_limit
    if restarts < limit:
        nxt = attempt + 1
        b.actions.append(DeleteRayJob(name))
        b.actions.append(EnsureChildren(nxt, bool(tj.spec.queue_name) or tj.spec.suspend))
        b.status.update(
            {
                "attempt": nxt,
                "restarts": restarts + 1,
                "rayJobName": rayjob_name(b.obs.meta.name, nxt),
            }
        )
        for key in ("rayClusterName", "dashboardURL", "workers"):
            b.status[key] = None
        msg = (
            f"attempt {attempt} failed ({reason}: {message}); retry {restarts + 1} of {limit} "
            f"starts RayJob {rayjob_name(b.obs.meta.name, nxt)} from the latest checkpoint"
        )
        b.set(c.RUNNING, False, "Retrying", msg)
        b.set(c.RECONCILING, True, "Retrying", msg)
        return b.finish(PENDING)
    if limit > 0:
        return _fail(
            b,
            "BackoffLimitExceeded",
            f"attempt {attempt} failed ({reason}: {message}) and spec.backoffLimit ({limit}) "
            "retries are used up",
        )
    return _fail(b, reason, message)


def _fail(b: _Builder, reason: str, message: str) -> Plan:
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
