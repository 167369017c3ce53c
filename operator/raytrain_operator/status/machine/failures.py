"""Why an attempt failed and what follows: a retry under spec.backoffLimit, a preemption under
spec.disruption.maxPreemptions, or the end of the job. The classification itself is triage's;
this is the glue that feeds it the attempt's evidence and applies the job's retry policy."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from raytrain_contract.api.v1alpha1 import DisruptionSpec, TrainJob
from raytrain_contract.timefmt import parse_rfc3339
from raytrain_operator.builders.names import rayjob_name
from raytrain_operator.builders.pods import DEFAULT_HEAD_RESOURCES
from raytrain_operator.status import conditions as c
from raytrain_operator.status import triage
from raytrain_operator.status.machine.observed import (
    _cluster_start,
    _report,
    _trainer_phase,
    is_terminal,
)
from raytrain_operator.status.machine.pass_builder import (
    _advance,
    _Builder,
    _cluster_state,
    _fail,
    how_to_continue,
)
from raytrain_operator.status.machine.plan_types import (
    FAILED,
    PENDING,
    SUCCEEDED,
    DeleteRayJob,
    Plan,
)


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
    found = triage.head_out_of_memory(b.obs.status, attempt, found, head_memory(tj))
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


def _deadline_exceeded(b: _Builder, tj: TrainJob, name: str, elapsed: float) -> Plan:
    """spec.activeDeadlineSeconds ran out: delete the RayJobs of every attempt and fail the
    job, saying what the attempt's pods show kept it from running, when they show something."""
    obs = b.obs
    if obs.rayjob is not None:
        b.actions.append(DeleteRayJob(name))
    b.actions += [DeleteRayJob(n) for n, gone in sorted(obs.older_rayjobs.items()) if not gone]
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
        f"({tj.spec.active_deadline_seconds}); its RayJob was deleted.{why} "
        f"{how_to_continue(obs.meta.name, obs.status)}, with a larger activeDeadlineSeconds",
    )
