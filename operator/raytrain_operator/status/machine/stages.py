"""`plan`: one reconcile pass as an ordered list of stages, the first that decides wins.

Each stage takes the pass's `_Builder` and its `_Pass` and returns a `Plan` when it decides the
pass, or None to hand it on. A few stages decide nothing: they record what every later outcome
carries (a condition, an action, a due time) and always hand on. The order is the policy: a
stage's docstring says why it comes where it does.
"""

from __future__ import annotations

from collections.abc import Callable

from raytrain_contract.meta import ANNOTATION_CHECKPOINT_REQUESTED
from raytrain_contract.pods import run_name
from raytrain_contract.timefmt import parse_rfc3339
from raytrain_operator.builders.names import rayjob_name
from raytrain_operator.status import conditions as c
from raytrain_operator.status import triage
from raytrain_operator.status.machine import hangs, rejections
from raytrain_operator.status.machine.failures import (
    _attempt_failed,
    _deadline_exceeded,
    _pre_running_deadline,
    head_memory,
    worker_memory,
)
from raytrain_operator.status.machine.observed import (
    _owned_by,
    _waiting_since,
    current_attempt,
    is_terminal,
)
from raytrain_operator.status.machine.pass_builder import (
    _Builder,
    _cluster_state,
    _fail,
    _observe_rayjob,
    _Pass,
    _succeed,
    _terminal,
)
from raytrain_operator.status.machine.plan_types import (
    FAILED,
    PENDING,
    RUNNING,
    STALLED,
    SUCCEEDED,
    SUSPENDED,
    Annotate,
    EnsureChildren,
    Observation,
    Plan,
)
from raytrain_operator.status.machine.spec_changes import _pending_change
from raytrain_operator.status.machine.suspension import (
    _await_previous,
    _queued,
    _resume,
    _suspend,
)

#: A stage: a Plan when it decides the pass, None to hand the pass on to the next.
Stage = Callable[[_Builder, _Pass], Plan | None]


def _begin(b: _Builder) -> _Pass:
    """The attempt the job is at, and what every pass reports whatever it decides."""
    obs = b.obs
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
    return _Pass(obs, attempt, restarts)


# ------------------------------------------------------------------------ the job as a whole


def _rejected_checkpoints(b: _Builder, p: _Pass) -> Plan | None:
    """Decides nothing: each checkpoint the runtime's resume check passed over since the last
    pass becomes an Event, and status.announcedRejection the newest of them
    (machine/rejections.py).

    First: every pass announces them, whatever it decides, the one that finds the attempt failed
    (no checkpoint could be used) or the job finished among them.
    """
    st = b.obs.status
    fresh = rejections.new_entries(st)
    if fresh:
        checkpoint = st.get("checkpoint") or {}
        b.rejections.extend(rejections.message(e, checkpoint) for e in fresh)
        b.status[rejections.ANNOUNCED] = rejections.marker(fresh[-1])
    return None


def _finished_job(b: _Builder, p: _Pass) -> Plan | None:
    """A job that succeeded or failed is never run again: only its TTL clean-up is left.

    First: a finished job stays finished whatever its spec or children look like now.
    """
    if is_terminal(b.obs.status):
        return _terminal(b, p.attempt)
    return None


def _invalid_spec(b: _Builder, p: _Pass) -> Plan | None:
    """A spec that did not parse or can never be built stalls the job, with no RayJob.

    Before every stage that reads the spec: from here on the TrainJob (`p.tj`) is there.
    """
    obs = b.obs
    if obs.trainjob is not None and not obs.spec_problem:
        return None
    reason = obs.spec_problem_reason if obs.spec_problem else "InvalidSpec"
    b.set(c.STALLED, True, reason, obs.spec_problem or "the spec could not be parsed")
    b.set(c.CREATED, False, reason, "no RayJob is created until the spec is fixed")
    return b.finish(STALLED)


def _name_conflict(b: _Builder, p: _Pass) -> Plan | None:
    """A child's name taken by an object this TrainJob does not own stalls the job (looked at
    again in 30 s).

    Before anything reads or acts on the RayJob: one that is not this job's is left alone.
    """
    obs = b.obs
    meta, rj = obs.meta, obs.rayjob
    conflict = obs.conflict
    if conflict is None and rj is not None and not _owned_by(rj, meta.uid):
        conflict = (
            f"a RayJob named {p.name} exists in namespace {meta.namespace} but does not belong "
            f"to this TrainJob (uid {meta.uid}); delete that RayJob or rename the TrainJob"
        )
    if conflict is None:
        return None
    b.set(c.STALLED, True, "NameConflict", conflict)
    b.due_in(30)
    return b.finish(STALLED)


def _account_attempt(b: _Builder, p: _Pass) -> Plan | None:
    """Decides nothing: the attempt's cluster time goes into status.goodput from here on.

    Right after `_name_conflict`: only a RayJob known to be this job's is accounted, and every
    pass that gets further accounts it, whatever it decides.
    """
    b.accounted_attempt = p.attempt
    return None


def _rejected_child(b: _Builder, p: _Pass) -> Plan | None:
    """A child the API server refused stalls the job with the server's own words (looked at
    again in 30 s).

    After the conflict (a taken name is the clearer cause), before anything that would try to
    create children again.
    """
    if b.obs.rejected is None:
        return None
    reason, msg = b.obs.rejected
    b.set(c.STALLED, True, reason, msg)
    b.set(c.CREATED, False, reason, "the API server refused a child; see Stalled")
    b.due_in(30)
    return b.finish(STALLED)


def _forget_checkpoint_request(b: _Builder, p: _Pass) -> Plan | None:
    """Decides nothing: with spec.suspend false, the checkpoint request of an earlier suspend
    is removed, so that a later suspend asks for a fresh checkpoint.

    Before every stage that may end or suspend the attempt, so that their plans carry it.
    """
    if not p.tj.spec.suspend and ANNOTATION_CHECKPOINT_REQUESTED in b.obs.meta.annotations:
        # A request belongs to one suspend: a later suspend must ask for a fresh checkpoint.
        b.actions.append(Annotate(ANNOTATION_CHECKPOINT_REQUESTED, None))
    return None


def _active_deadline(b: _Builder, p: _Pass) -> Plan | None:
    """spec.activeDeadlineSeconds, measured from the first start: once it ran out, every
    RayJob is deleted and the job fails; until then the pass is due again when it runs out.

    Before the RayJob is looked at: the deadline ends the job whatever its attempt is doing.
    """
    spec = p.tj.spec
    start = parse_rfc3339(b.obs.status.get("startTime"))
    if not spec.active_deadline_seconds or start is None:
        return None
    elapsed = (b.obs.now - start).total_seconds()
    left = spec.active_deadline_seconds - elapsed
    if left <= 0:
        return _deadline_exceeded(b, p.tj, p.name, elapsed)
    b.due_in(left)
    return None


# ----------------------------------------------------------------- no RayJob yet for the attempt


def _previous_attempt_draining(b: _Builder, p: _Pass) -> Plan | None:
    """No RayJob yet, but one of an earlier attempt still exists: it is deleted and waited for.

    First of the stages without a RayJob: two attempts never run at once, so nothing is created
    (and no preflight problem reported) while an earlier one is still there.
    """
    if b.obs.rayjob is not None or not b.obs.older_rayjobs:
        return None
    return _await_previous(b, p.name)


def _preflight_problem(b: _Builder, p: _Pass) -> Plan | None:
    """No RayJob yet and the storage preflight found a problem: the job stalls, with no RayJob.

    Right before `_create_rayjob`, which it holds back.
    """
    if b.obs.rayjob is not None or b.obs.preflight_problem is None:
        return None
    reason, msg = b.obs.preflight_problem
    b.set(c.STALLED, True, reason, msg)
    b.set(c.CREATED, False, reason, "no RayJob is created until the problem is fixed")
    return b.finish(STALLED)


def _create_rayjob(b: _Builder, p: _Pass) -> Plan | None:
    """No RayJob yet: create the attempt's children, the RayJob suspended when spec.suspend or
    a Kueue queue holds it.

    Decides every pass without a RayJob: every stage after it has one (`p.rj`).
    """
    obs = b.obs
    if obs.rayjob is not None:
        return None
    spec = p.tj.spec
    suspend = spec.suspend or bool(spec.queue_name)
    b.actions.append(
        EnsureChildren(p.attempt, suspend, obs.resume_from, hangs.hang_nodes(obs.status))
    )
    if obs.resume_from:
        b.status["resumedFrom"] = obs.resume_from
    b.set(c.CREATED, True, "RayJobCreated", f"created RayJob {p.name}")
    if spec.suspend:
        b.set(c.SUSPENDED, True, "Suspended", "spec.suspend is true; no Ray cluster runs")
        b.set(c.RUNNING, False, "Suspended", "")
        return b.finish(SUSPENDED)
    if spec.queue_name:
        return _queued(b, spec.queue_name)
    b.set(c.SUSPENDED, False, "NotSuspended", "")
    b.set(c.RUNNING, False, "Initializing", "")
    b.set(c.RECONCILING, True, "Initializing", f"waiting for KubeRay to start RayJob {p.name}")
    return b.finish(PENDING)


# --------------------------------------------------------------------- the attempt's RayJob


def _rayjob_exists(b: _Builder, p: _Pass) -> Plan | None:
    """Decides nothing: Created says the RayJob exists, in every plan from here on."""
    b.set(c.CREATED, True, "RayJobCreated", f"RayJob {p.name} exists")
    return None


def _rayjob_deleting(b: _Builder, p: _Pass) -> Plan | None:
    """The attempt's RayJob is being deleted: it is waited for, then created again.

    Before its status is read: what a RayJob on its way out says no longer counts.
    """
    if not p.rj_meta.get("deletionTimestamp"):
        return None
    msg = f"RayJob {p.name} is being deleted; it is created again once it and its pods are gone"
    b.set(c.RUNNING, False, "RayJobDeleting", msg)
    b.set(c.RECONCILING, True, "RayJobDeleting", msg)
    b.due_in(2)
    return b.finish(PENDING)


def _observe(b: _Builder, p: _Pass) -> Plan | None:
    """Decides nothing: copies the cluster's name, dashboard, workers and the first start from
    the RayJob's status into every plan from here on."""
    _observe_rayjob(b, p.rj_status, p.rj_suspended, b.obs.status)
    return None


def _validation_failed(b: _Builder, p: _Pass) -> Plan | None:
    """KubeRay refused the RayJob: the job fails at once, as a retry would fail the same way.

    Before the outcome: such a RayJob never ran, so neither the runtime nor its status says
    anything about training.
    """
    if p.deployment != "ValidationFailed":
        return None
    detail = p.rj_status.get("message") or p.rj_status.get("reason") or "no message"
    return _fail(
        b,
        "RayJobValidationFailed",
        f"KubeRay refused RayJob {p.name}: {detail}. The same spec fails the same way on "
        "every retry, so none is made; fix the field KubeRay names and create the "
        "TrainJob again",
    )


def _succeeded(b: _Builder, p: _Pass) -> Plan | None:
    """The attempt succeeded: by the runtime's report, or by the RayJob when the runtime said
    nothing.

    Before the failure: a runtime that reported success wins over a RayJob that ended badly
    after it (a cluster torn down once training was over).
    """
    phase, message = p.trainer
    if not (phase == SUCCEEDED or (phase is None and p.job_status == "SUCCEEDED")):
        return None
    source = "the trainer runtime" if phase == SUCCEEDED else f"RayJob {p.name}"
    return _succeed(b, message or f"training finished (reported by {source})")


def _attempt_failure(b: _Builder, p: _Pass) -> Plan | None:
    """The attempt failed, by the runtime's report or the RayJob's status: triage classifies
    it from the evidence, and the retry policy decides between a retry and the end of the job.

    Right after `_succeeded`, before suspend and resume: an attempt that already failed is
    retried or ends the job, never suspended.
    """
    phase, message = p.trainer
    deployment, job_status, rj_status = p.deployment, p.job_status, p.rj_status
    failure: tuple[str, str] | None = None
    if phase == FAILED:
        failure = ("TrainingFailed", message or "the trainer runtime reported a failure")
    elif deployment == "Failed" or job_status in ("FAILED", "STOPPED"):
        detail = rj_status.get("message") or rj_status.get("reason") or job_status or deployment
        failure = (
            "RayJobFailed",
            f"RayJob {p.name} ended with jobDeploymentStatus {deployment or '-'}, jobStatus "
            f"{job_status or '-'}: {detail}",
        )
    if failure is None:
        return None
    obs, tj = b.obs, p.tj
    evidence = triage.Evidence(
        rayjob_status=rj_status,
        pods=obs.attempt_pods,
        events=obs.attempt_events,
        report=p.report,
        worker_memory=worker_memory(tj),
        head_memory=head_memory(tj),
    )
    return _attempt_failed(b, tj, p.attempt, p.restarts, failure, triage.classify(evidence))


def _suspend_requested(b: _Builder, p: _Pass) -> Plan | None:
    """spec.suspend is true: ask the runtime for a checkpoint, wait for it a grace period, then
    suspend the RayJob (its Ray cluster is removed).

    After the outcome: a finished or failed attempt is not suspended. Before resume, which only
    applies with spec.suspend false.
    """
    if not p.tj.spec.suspend:
        return None
    phase, _ = p.trainer
    return _suspend(b, p.name, p.rj_suspended, p.deployment, p.job_status, phase, p.rj_status)


def _resume_suspended(b: _Builder, p: _Pass) -> Plan | None:
    """spec.suspend is false but the RayJob is suspended: resume it (a new attempt when the
    spec changed meanwhile), unless it is Kueue's to admit.

    Right after `_suspend_requested`, so a suspended RayJob never reaches the running stages.
    """
    if not p.rj_suspended:
        return None
    return _resume(b, p.tj, p.name, p.attempt, p.restarts, p.rj_annotations)


def _not_suspended(b: _Builder, p: _Pass) -> Plan | None:
    """Decides nothing: the attempt is not suspended, and a spec change it does not carry is
    reported as pending (Reconciling, and the generation is not observed).

    After suspend and resume: a suspended attempt's spec change is carried by the attempt that
    resumes, so it is never pending. Every stage left is an attempt that runs or is starting.
    """
    b.set(c.SUSPENDED, False, "NotSuspended", "")
    b.pending = _pending_change(b.obs, p.tj, p.rj_annotations, p.name, p.attempt)
    return None


def _running(b: _Builder, p: _Pass) -> Plan | None:
    """The Ray job runs and the runtime (or the RayJob) says it trains: Running, with the
    progress the runtime reports.

    Before the pre-running deadline, which only counts while the attempt has not started.
    """
    phase, _ = p.trainer
    if not (p.deployment == "Running" and (phase == RUNNING or p.job_status == "RUNNING")):
        return None
    progress = p.report.get("progressPercentage")
    detail = f"jobStatus {p.job_status or 'PENDING'}"
    if progress is not None:
        detail += f", progress {progress}%"
    b.set(c.RUNNING, True, "RayJobRunning", f"RayJob {p.name} is Running ({detail})")
    return b.finish(RUNNING)


def _pre_running_timeout(b: _Builder, p: _Pass) -> Plan | None:
    """spec.preRunningDeadlineSeconds, measured since the cluster was asked for: once it ran
    out, the RayJob is deleted and the job fails; until then the pass is due again when it does.

    After `_running` (a training attempt is past it), before the stages that wait for a start.
    """
    spec = p.tj.spec
    if not spec.pre_running_deadline_seconds:
        return None
    waited = _waiting_since(b.obs.status, p.rj_meta)
    if waited is None:
        return None
    elapsed = (b.obs.now - waited).total_seconds()
    left = spec.pre_running_deadline_seconds - elapsed
    if left <= 0:
        return _pre_running_deadline(b, p.tj, p.name, p.attempt, p.deployment, int(elapsed))
    b.due_in(left)
    return None


def _starting(b: _Builder, p: _Pass) -> Plan | None:
    """The Ray job was submitted but the runtime of this attempt has not reported yet.

    After the pre-running deadline, which still counts until the runtime reports.
    """
    if p.deployment != "Running":
        return None
    msg = (
        f"RayJob {p.name} submitted the Ray job; waiting for the trainer runtime of attempt "
        f"{p.attempt} to report from its cluster"
    )
    b.set(c.RUNNING, False, "Starting", msg)
    b.set(c.RECONCILING, True, "Starting", msg)
    return b.finish(PENDING)


#: Running's reason (and Reconciling's) while the cluster is on its way, by jobDeploymentStatus.
_CLUSTER_REASONS = {
    "": "Initializing",
    "New": "Initializing",
    "Initializing": "ClusterStarting",
    "Waiting": "Waiting",
    "Retrying": "Retrying",
    "Suspending": "Resuming",
    "Suspended": "Resuming",
}


def _cluster_starting(b: _Builder, p: _Pass) -> Plan:
    """What no stage decided: the attempt's cluster is on its way, with the workers ready so
    far and what keeps the cluster from its pods (`Observation.cluster_problem`)."""
    reason = _CLUSTER_REASONS.get(p.deployment, "Initializing")
    b.set(c.RUNNING, False, reason, "")
    message = _cluster_state(b, p.name, p.deployment, "is")
    if b.obs.cluster_problem is not None:
        reason, problem = b.obs.cluster_problem
        message = f"{message}. {problem}"
        if reason in triage.CONFIG_REASONS:
            # Nothing goes on until the user fixes the reference: stalled, as preflight would
            # have said had it read the Secret; the kubelet starts the pods once it is right.
            b.set(c.STALLED, True, reason, problem)
            b.set(c.RECONCILING, True, reason, message)
            return b.finish(STALLED)
    b.set(c.RECONCILING, True, reason, message)
    return b.finish(PENDING)


#: The stages of a pass, in order: the first that returns a Plan decides the pass.
STAGES: tuple[Stage, ...] = (
    _rejected_checkpoints,
    _finished_job,
    _invalid_spec,
    _name_conflict,
    _account_attempt,
    _rejected_child,
    _forget_checkpoint_request,
    _active_deadline,
    _previous_attempt_draining,
    _preflight_problem,
    _create_rayjob,
    _rayjob_exists,
    _rayjob_deleting,
    _observe,
    _validation_failed,
    _succeeded,
    _attempt_failure,
    _suspend_requested,
    _resume_suspended,
    _not_suspended,
    hangs.stragglers,
    hangs.hang_watch,
    _running,
    _pre_running_timeout,
    _starting,
)


def plan(obs: Observation) -> Plan:
    """Decide one reconcile pass: the STAGES in order until one decides, and for a pass that
    none decides, an attempt whose cluster is on its way (`_cluster_starting`)."""
    b = _Builder(obs)
    p = _begin(b)
    for stage in STAGES:
        decided = stage(b, p)
        if decided is not None:
            return decided
    return _cluster_starting(b, p)
